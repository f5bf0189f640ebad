#!/usr/bin/env bash
# `kforge run --launcher slurm` under a real Slurm on this host: munged, slurmctld and two slurmd
# (nodes n1 and n2, both this host) with every file under a temporary directory, then an sbatch job
# running the stand-in loop with its sandbox worker on the second node, started by the head as a
# job step. The run must complete with balanced counts and the worker must have run as a step on
# n2. Then a placement the allocation cannot hold must fail the job with a message naming it, and
# a step that fails must fail the run naming its process, node and exit status.
# Daemons and files are removed on every exit. Needs root, slurm-wlm and munge (deploy/setup.sh);
# exits 77 (skipped) without them.
#   slurm_launch_test.sh KFORGE_BINARY REPO_ROOT
set -euo pipefail
kforge=$(readlink -f "$1") root=$(readlink -f "$2")
skip() { echo "SKIP: $*"; exit 77; }
[[ $(id -u) -eq 0 ]] || skip "needs root (the daemons run as root)"
for t in munged slurmctld slurmd sbatch srun scontrol sinfo; do
  command -v "$t" >/dev/null || [[ -x /usr/sbin/$t ]] || skip "$t not installed (apt-get install slurm-wlm munge)"
done
export PATH=$PATH:/usr/sbin

work=$(mktemp -d /tmp/kforge-slurm.XXXXXX)
cleanup() {
  # Jobs first (their steps hold processes), then the daemons this test started, by the pids they
  # wrote under $work.
  [[ -f $work/slurm.conf ]] && SLURM_CONF=$work/slurm.conf timeout 10 scancel --full --quiet -u root 2>/dev/null || true
  for f in "$work"/*.pid; do [[ -f $f ]] && kill "$(cat "$f")" 2>/dev/null || true; done
  sleep 1
  for f in "$work"/*.pid; do [[ -f $f ]] && kill -9 "$(cat "$f")" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  for f in "$work"/*.log "$work"/job-*.out; do [[ -f $f ]] && { echo "--- $f"; tail -n 40 "$f"; }; done
  exit 1
}

# Free tcp ports for slurmctld and the two slurmd (the kernel's choice, released at once).
read -r ctld_port d1_port d2_port < <(python3 -c '
import socket
ss = [socket.socket() for _ in range(3)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])')

# munge: a key of this test's own and a socket under $work.
mkdir -p "$work/munge" && chmod 700 "$work/munge"
dd if=/dev/urandom of="$work/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$work/munge/munge.key"
munged --force --key-file="$work/munge/munge.key" --socket="$work/munge/munge.sock" \
  --pid-file="$work/munged.pid" --log-file="$work/munged.log" --seed-file="$work/munge/seed" \
  || fail "munged did not start"

host=$(hostname -s)
mkdir -p "$work/state" "$work/spool/n1" "$work/spool/n2" "$work/jobs"
cat >"$work/slurm.conf" <<CONF
ClusterName=kforgetest
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$ctld_port
SlurmdPort=$d1_port
AuthType=auth/munge
AuthInfo=socket=$work/munge/munge.sock
CredType=cred/munge
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool/%n
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd-%n.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
PlugStackConfig=$work/plugstack.conf
NodeName=n1 NodeHostname=$host NodeAddr=127.0.0.1 Port=$d1_port CPUs=1 State=UNKNOWN
NodeName=n2 NodeHostname=$host NodeAddr=127.0.0.1 Port=$d2_port CPUs=1 State=UNKNOWN
PartitionName=test Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
: >"$work/plugstack.conf"
export SLURM_CONF=$work/slurm.conf
slurmctld -i -f "$work/slurm.conf" || fail "slurmctld did not start"
slurmd -N n1 -f "$work/slurm.conf" || fail "slurmd n1 did not start"
slurmd -N n2 -f "$work/slurm.conf" || fail "slurmd n2 did not start"

# Both nodes idle before a job goes in.
for _ in $(seq 60); do
  idle=$(sinfo -h -N -o '%N %t' 2>/dev/null | grep -c ' idle' || true)
  [[ $idle -eq 2 ]] && break
  sleep 1
done
[[ ${idle:-0} -eq 2 ]] || { sinfo -N 2>&1 || true; fail "the two nodes did not come up idle"; }

# The stand-in loop with the sandbox worker on a node of its own ("judge" takes n2).
cat >"$work/remote_sandbox.toml" <<'TOML'
[run]
name = "slurm-stand-in"
mode = "async"
steps = 6
stall_timeout_s = 60.0
progress = false

[[process]]
name = "head"
[process.actors]
task_generator = { count = 1 }
sampler        = { count = 1 }
sandbox_pool   = { count = 1 }
reward         = { count = 1 }
buffer         = { count = 1 }
trainer        = { count = 1 }

[[process]]
name = "judge"
node = "judge"
[process.actors]
sandbox_worker = { count = 2 }
TOML

run_job() {  # run_job NAME MANIFEST NODES: submits, waits, echoes the job's exit code
  local name=$1 manifest=$2 nodes=$3
  cat >"$work/jobs/$name.sbatch" <<JOB
#!/bin/bash
#SBATCH --nodes=$nodes --ntasks-per-node=1 --output=$work/job-$name.out
cd "$work"
exec "$kforge" run --launcher slurm --manifest "$manifest" --run-dir "$work/runs/$name" --no-progress
JOB
  local id
  id=$(sbatch --parsable "$work/jobs/$name.sbatch") || fail "sbatch refused job $name"
  for _ in $(seq 240); do
    squeue -h -j "$id" 2>/dev/null | grep -q . || break
    sleep 1
  done
  squeue -h -j "$id" 2>/dev/null | grep -q . && fail "job $name ($id) still running after 240 s"
  echo "job $name ($id) ended at ${SECONDS}s" >&2
  # Without accounting the exit code is in the batch output: kforge's own line, or the shell's.
  echo "$id"
}

id=$(run_job good "$work/remote_sandbox.toml" 2)
out=$work/job-good.out
summary=$work/runs/good/summary.json
[[ -f $summary ]] || fail "no summary.json from job $id"
python3 - "$summary" <<'PY' || fail "the run's summary is not a completed run with balanced counts"
import json, sys
s = json.load(open(sys.argv[1]))
print("outcome:", s.get("outcome"), "versions:", s.get("versions"), "balanced:", s.get("balanced"))
assert s["outcome"] == "completed", s["outcome"]
assert s["versions"] >= s["steps"], (s["versions"], s["steps"])
assert s["balanced"] is True
judge = [p for p in s["processes"] if p["name"] == "judge"]
assert judge, "no process judge in the summary"
stages = [x for x in s["stages"] if x.get("kind") == "sandbox_worker"]
assert stages and all(x.get("received", 0) > 0 for x in stages), stages
checks = s["checks"]
assert checks, "no count checks"
bad = [c for c in checks if not c.get("ok")]
assert not bad, bad
PY
grep -E '^slurm:|^started process|^kforge run: process' "$out" || true
grep -q 'slurm: node "judge" -> n2' "$out" || fail "the head did not place node judge on n2"
grep -q "started process judge as a Slurm job step on node n2" "$out" || fail "no job step for judge"
grep -q "kforge worker: process judge running" "$work/runs/good/logs/judge.log" || fail "judge's log does not show it ran"
echo "slurm launch: the stand-in run completed on n1 + n2"

# Three node names on a two-node allocation: the job fails at once, naming the shortfall.
cp "$work/remote_sandbox.toml" "$work/three_nodes.toml"
cat >>"$work/three_nodes.toml" <<'TOML'

[[process]]
name = "judge2"
node = "judge2"
[process.actors]
sandbox_worker = { count = 1 }
TOML
run_job short "$work/three_nodes.toml" 2 >/dev/null
grep -q "places processes on 3 nodes" "$work/job-short.out" || fail "a placement too big for the allocation was not refused by name"
echo "slurm launch: a manifest needing 3 nodes on 2 is refused"

# A step that fails fails the run, naming the process, its node and its exit status: the task
# generator on n2 with a task file that is not there (the head checks only its own node's files).
cat >"$work/failing_step.toml" <<'TOML'
[run]
name = "slurm-failing-step"
steps = 6
stall_timeout_s = 60.0

[tasks]
source = "files"
files = ["/nonexistent/kforge-slurm-test-tasks.jsonl"]

[[process]]
name = "head"
[process.actors]
sampler        = { count = 1 }
sandbox_pool   = { count = 1 }
sandbox_worker = { count = 1 }
reward         = { count = 1 }
buffer         = { count = 1 }
trainer        = { count = 1 }

[[process]]
name = "gen"
node = "gen"
[process.actors]
task_generator = { count = 1 }
TOML
run_job failing "$work/failing_step.toml" 2 >/dev/null
grep -E "^kforge run: process gen" "$work/job-failing.out" || true
grep -q "process gen (Slurm job step on node n2, pid [0-9]*) exited with status 1" "$work/job-failing.out" \
  || fail "the failed step was not reported with its node and exit status"
python3 - "$work/runs/failing/summary.json" <<'PY' || fail "the run with a failed step did not end as failed"
import json, sys
s = json.load(open(sys.argv[1]))
print("outcome:", s["outcome"])
assert s["outcome"].startswith("failed: process gen"), s["outcome"]
PY
echo "slurm launch: a failed step fails the run by name"
echo "slurm launch: ok"

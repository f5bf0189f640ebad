#!/usr/bin/env bash
# Checking a Slurm placement without a cluster: the environment of a simulated allocation
# (SLURM_JOB_ID, SLURM_JOB_NODELIST, SLURM_GPUS_ON_NODE) is all `kforge manifest --launcher slurm`
# and `kforge run --check --launcher slurm` read. The 4x8 example fits 4 nodes of 8 GPUs, not 3
# nodes nor 4 GPUs a node; outside an allocation the launch says so; a malformed node list is named.
#   slurm_check_test.sh KFORGE_BINARY REPO_ROOT
set -euo pipefail
kforge=$1 root=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; cat "$work/log" 2>/dev/null || true; exit 1; }
example=$root/deploy/slurm/kforge_4x8.toml
# Only the variables given: none of a surrounding allocation leaks in.
alloc() { env -u SLURMD_NODENAME -u SLURM_GPUS_PER_NODE -u SLURM_JOB_GPUS SLURM_JOB_ID=4242 "$@"; }

alloc SLURM_JOB_NODELIST='gpu[01-04]' SLURM_GPUS_ON_NODE=8 "$kforge" manifest --launcher slurm "$example" >"$work/log" 2>&1 \
  || fail "the 4x8 example does not place on 4 nodes of 8 GPUs"
grep -q 'slurm: node "sandbox" -> gpu04' "$work/log" || fail "node sandbox not on gpu04"
grep -q 'sandbox_workers.*tcp://gpu01:' "$work/log" || fail "the sandbox workers' link is not bound on the head's node"

if alloc SLURM_JOB_NODELIST='gpu[01-03]' SLURM_GPUS_ON_NODE=8 "$kforge" manifest --launcher slurm "$example" >"$work/log" 2>&1; then
  fail "the 4x8 example placed on 3 nodes"
fi
grep -q 'places processes on 4 nodes.*the allocation has 3' "$work/log" || fail "no message naming the node shortfall"

if alloc SLURM_JOB_NODELIST='gpu[01-04]' SLURM_GPUS_ON_NODE=4 "$kforge" manifest --launcher slurm "$example" >"$work/log" 2>&1; then
  fail "the 4x8 example placed on 4 GPUs a node"
fi
grep -q 'names GPU 7, but the allocation has 4 GPU(s)' "$work/log" || fail "no message naming the GPU shortfall"

if env -u SLURM_JOB_ID -u SLURM_JOB_NODELIST "$kforge" run --check --launcher slurm --manifest "$example" >"$work/log" 2>&1; then
  fail "a launch outside an allocation went on"
fi
grep -q 'not inside a Slurm allocation' "$work/log" || fail "no message saying there is no allocation"

if alloc SLURM_JOB_NODELIST='gpu[01-04' "$kforge" run --check --launcher slurm --manifest "$example" >"$work/log" 2>&1; then
  fail "a malformed node list was accepted"
fi
grep -q "SLURM_JOB_NODELIST: malformed node list entry \"gpu\[01-04\"" "$work/log" || fail "no message naming the malformed node list"

# --check of a CPU topology under a simulated allocation: the placement, the plan, the checks.
cat >"$work/remote.toml" <<'TOML'
[[process]]
name = "head"
[process.actors]
task_generator = {}
sampler = {}
sandbox_pool = {}
reward = {}
buffer = {}
trainer = {}

[[process]]
name = "judge"
node = "judge"
[process.actors]
sandbox_worker = {}
TOML
alloc SLURM_JOB_NODELIST='n[1-2]' SLURMD_NODENAME=n1 "$kforge" run --check --launcher slurm --manifest "$work/remote.toml" \
  --run-dir "$work/run" >"$work/log" 2>&1 || fail "run --check under a simulated allocation"
grep -q 'slurm: node "judge" -> n2' "$work/log" || fail "--check did not show the placement"
[[ ! -e $work/run ]] || fail "--check made a run directory"
echo "slurm placement checks: ok"

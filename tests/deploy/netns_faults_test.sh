#!/usr/bin/env bash
# Hosts that fail, on one machine: network namespaces as hosts on a bridge. The stand-in loop runs
# with its head (task generator, sandbox pool, reward, buffer, trainer) on one host, its sampler on
# a rollout host and one sandbox worker on each of two sandbox hosts, every link a tcp endpoint at
# the head host's address. (The stand-in trainer has no ranks to place on a host of their own:
# trainer.remote_ranks needs a real policy.) One fault a run:
#   kill    SIGKILL to every process of sandbox host A; the run goes on with host B
#   link    host A's link down for 10 s, then up again; A's worker must join the pool again and
#           take work again
#   netem   50 ms delay and 5 % loss each way on host A's link for the whole run
# Each run must complete with every count check ok, more steps after the fault, nothing lost
# (no item failed) and nothing judged twice; a lost host's items must be re-queued and its loss
# noticed within NOTICE_BOUND_S (the pool's log line "worker ... lost" against the fault's time).
# Prints a table of the measurements. Namespaces, bridge and processes are removed on every exit.
# Needs root, iproute2 (ip, tc) and the kernel's netns, veth and bridge; exits 77 (skipped)
# without them. Without netem in the kernel the netem fault alone is skipped, and said so.
#   netns_faults_test.sh KFORGE_BINARY REPO_ROOT [kill|link|netem|none ...]   (none: no fault)
set -uo pipefail
kforge=$(readlink -f "$1")
scenarios=("${@:3}")
((${#scenarios[@]})) || scenarios=(kill link netem)
skip() { echo "SKIP: $*"; exit 77; }
[[ $(id -u) -eq 0 ]] || skip "needs root (network namespaces)"
export PATH=$PATH:/usr/sbin:/sbin
for t in ip tc python3; do command -v "$t" >/dev/null || skip "$t not found (apt-get install iproute2 python3)"; done

NOTICE_BOUND_S=${NOTICE_BOUND_S:-3}  # 4 missed heartbeats of 250 ms, with room for a loaded host
REJOIN_BOUND_S=${REJOIN_BOUND_S:-15} # the worker's reconnect back-off doubles up to 8 s
tag=kf$(($$ % 100000))
net=10.213.77
hosts=(head sba sbb roll)       # namespace suffix, also the veth's
declare -A ip=([head]=$net.1 [sba]=$net.2 [sbb]=$net.3 [roll]=$net.4)
work=$(mktemp -d /tmp/kforge-netns.XXXXXX)

kill_host() {  # every process in the host's namespace
  local pids
  pids=$(ip netns pids "$tag-$1" 2>/dev/null) || return 0
  [[ -n $pids ]] && kill "-${2:-KILL}" $pids 2>/dev/null
  return 0
}
cleanup() {
  for h in "${hosts[@]}"; do kill_host "$h" TERM; done
  sleep 0.5
  for h in "${hosts[@]}"; do kill_host "$h" KILL; ip netns del "$tag-$h" 2>/dev/null; done
  ip link del "$tag-br" 2>/dev/null
  [[ ${KEEP_WORK:-0} == 1 ]] && echo "kept $work" || rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
fail() {
  echo "FAIL: $*"
  for f in "${cur:-$work}"/*.out "${cur:-$work}"/*.err "${cur:-$work}"/*.log; do
    [[ -f $f ]] && { echo "--- $f"; tail -n 25 "$f"; }
  done
  exit 1
}

# The hosts: a bridge in this namespace, one namespace per host joined to it by a veth pair whose
# outer end (tag-HOST) is the host's cable.
ip netns add "$tag-probe" 2>/dev/null || skip "cannot make network namespaces here"
ip netns del "$tag-probe"
ip link add "$tag-br" type bridge 2>/dev/null || skip "cannot make a bridge here"
ip link set "$tag-br" up
for h in "${hosts[@]}"; do
  ip netns add "$tag-$h" || fail "ip netns add $tag-$h"
  ip link add "$tag-$h" type veth peer name eth0 netns "$tag-$h" || skip "cannot make veth pairs here"
  ip link set "$tag-$h" master "$tag-br" up
  ip -n "$tag-$h" link set lo up
  ip -n "$tag-$h" addr add "${ip[$h]}/24" dev eth0
  ip -n "$tag-$h" link set eth0 up
done
# netem may be missing from the kernel (a minimal VM kernel has no sch_netem): then the netem fault
# alone is skipped, said as such.
have_netem=0
tc qdisc add dev "$tag-sba" root ${NETEM_QDISC:-netem delay 1ms} 2>/dev/null && have_netem=1 &&
  tc qdisc del dev "$tag-sba" root

source "$(dirname "$0")/netns_faults_lib.sh"

table=()
for s in "${scenarios[@]}"; do
  if [[ $s == netem && $have_netem == 0 ]]; then
    echo "== netem: SKIPPED: this kernel has no netem qdisc (tc: \"Specified qdisc kind is unknown\")"
    table+=("| netem 50 ms delay + 5 % loss each way on host A's link | not run: no netem in this kernel | | | | | | | |")
    continue
  fi
  run_scenario "$s" || fail "scenario $s"
done
echo
echo "| fault | noticed after | items re-queued | lost | duplicated | workers lost | rejoined after | steps | outcome |"
echo "|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${table[@]}"
echo "PASS"

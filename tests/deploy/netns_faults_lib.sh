# One run of the stand-in loop across the namespace hosts of netns_faults_test.sh, with one fault
# injected while it goes; sourced by that script (its variables: kforge, tag, ip, work, table).

# The topology: every link bound at the head host's address (every binding stage is there), the
# other hosts' processes on nodes of their own. A slow stand-in sandbox (100 ms a candidate, 4 at
# once a worker) keeps each worker holding work, so a lost host always has items to re-queue.
write_manifest() {
  local port=27100 l
  cat <<TOML
[run]
name = "netns-$1"
steps = 100000
progress = false

[[process]]
name = "head"
[process.actors]
task_generator = { count = 1 }
sandbox_pool   = { count = 1 }
reward         = { count = 1 }
buffer         = { count = 1 }
trainer        = { count = 1 }

[[process]]
name = "roll"
node = "rollout"
[process.actors]
sampler = { count = 1 }

[[process]]
name = "sba"
node = "sandbox-a"
[process.actors]
sandbox_worker = { count = 1 }

[[process]]
name = "sbb"
node = "sandbox-b"
[process.actors]
sandbox_worker = { count = 1 }

[sandbox]
stand_in_ms = 100
compile_jobs = 4

[endpoints]
TOML
  for l in tasks candidates sandbox_workers verdicts scored batches weights control metrics \
    feedback observations; do
    echo "$l = \"tcp://${ip[head]}:$((port++))\""
  done
}

# Policy versions the trainer has reported so far (0 before its first report).
versions_now() {
  local v
  v=$(grep -h '"stage":"trainer@head"' "$cur/run/metrics.jsonl" 2>/dev/null | tail -n 1 |
    sed -n 's/.*"received":\([0-9]*\).*/\1/p')
  echo "${v:-0}"
}

now() { date +%s.%N; }

# netem on both ends of host A's cable: delay and loss each way. NETEM_QDISC stands in another
# qdisc's words (e.g. "pfifo") to try the scenario's steps on a kernel without netem.
netem() {
  local q=${NETEM_QDISC:-netem delay 50ms loss 5%}
  if [[ $1 == add ]]; then
    # shellcheck disable=SC2086 # the qdisc's words
    tc qdisc add dev "$tag-sba" root $q && ip netns exec "$tag-sba" tc qdisc add dev eth0 root $q
  else
    tc qdisc del dev "$tag-sba" root; ip netns exec "$tag-sba" tc qdisc del dev eth0 root
  fi
}

run_scenario() {
  local name=$1 limit h pids=() t_fault=0 t_up=0 at_fault=0 line
  case $name in
    none | kill | netem) limit=20 ;;
    link) limit=36 ;;  # 10 s down, up to 8 s of the worker's back-off, then work again
    *) echo "unknown scenario $name"; return 1 ;;
  esac
  cur=$work/$name
  mkdir -p "$cur"
  write_manifest "$name" >"$cur/manifest.toml"
  echo "== $name: head on ${ip[head]}, sampler on ${ip[roll]}, sandbox workers on ${ip[sba]} (A), ${ip[sbb]} (B)"
  [[ $name == netem ]] && { netem add || return 1; }

  ip netns exec "$tag-head" "$kforge" run --manifest "$cur/manifest.toml" --run-dir "$cur/run" \
    --time-limit "$limit" --no-progress >"$cur/head.out" 2>"$cur/head.err" &
  local head=$!
  # The head prints the command each other node runs; run exactly that, in the node's namespace.
  for _ in $(seq 200); do
    [[ $(grep -c '^waiting for process' "$cur/head.out" 2>/dev/null) -eq 3 ]] && break
    kill -0 "$head" 2>/dev/null || { echo "the head exited before its workers started"; return 1; }
    sleep 0.1
  done
  for h in roll sba sbb; do
    line=$(sed -n "s/^waiting for process $h on node .*: run there \`\(.*\)\`\$/\1/p" "$cur/head.out")
    [[ -n $line ]] || { echo "no command printed for $h"; return 1; }
    # shellcheck disable=SC2086 # the printed command's words (no spaces in the paths: mktemp's)
    set -- $line
    ip netns exec "$tag-$h" "$kforge" "${@:2}" >"$cur/$h.log" 2>&1 &
    pids+=($!)
  done

  # The fault, once the loop has trained a couple of steps.
  for _ in $(seq 300); do
    (($(versions_now) >= 2)) && break
    kill -0 "$head" 2>/dev/null || break
    sleep 0.1
  done
  at_fault=$(versions_now)
  ((at_fault >= 2)) || { echo "the loop did not start (versions: $at_fault)"; return 1; }
  case $name in
    kill)
      t_fault=$(now)
      kill_host sba KILL
      ;;
    link)
      t_fault=$(now)
      ip link set "$tag-sba" down
      sleep 10
      ip link set "$tag-sba" up
      t_up=$(now)
      ;;
    none | netem) t_fault=$(now) ;;
  esac
  echo "   fault at version $at_fault"

  local waited=0
  while kill -0 "$head" 2>/dev/null && ((waited < limit + 90)); do sleep 1; ((waited++)); done
  kill -0 "$head" 2>/dev/null && { echo "the head did not end within $((limit + 90)) s"; return 1; }
  wait "$head"
  local head_rc=$?
  # The other hosts' processes end with the head (its shutdown command); wait for them a while.
  for _ in $(seq 30); do
    local alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    ((alive)) || break
    sleep 0.5
  done
  [[ $name == netem ]] && netem del
  tail -n 12 "$cur/head.out"
  ((head_rc == 0)) || { echo "kforge run exited with $head_rc"; return 1; }
  line=$(python3 "$(dirname "${BASH_SOURCE[0]}")/netns_faults_check.py" "$name" "$cur" "$t_fault" \
    "$t_up" "$at_fault" "$NOTICE_BOUND_S" "$REJOIN_BOUND_S") || { echo "$line"; return 1; }
  echo "$line"
  table+=("${line##*$'\n'}")
}

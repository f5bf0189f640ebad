#!/usr/bin/env bash
# deploy/make_tiny.sh's split, synth and rlpool steps at small counts (CPU, seconds): the RL pool
# has the size asked for and shares no id and no reference with the held-out built-ins or the
# corpus's tasks (the training built-ins and the synthesized ones), so RL on it leaves the
# held-out measure clean and poses tasks the model has not seen. And rlpool without
# the synth step's file stops with a message naming it.
# The pool is drawn with the corpus synthesis's own seed: without the exclusion it would repeat it.
#   make_tiny_rlpool_test.sh KFORGE_BINARY REPO_ROOT
set -euo pipefail
kforge=$1 root=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$root/deploy/make_tiny.sh" --kforge "$kforge" --work "$work/w" --model "$work/model" \
  --synth 300 --rl-pool 8 --rl-seed 1 --steps split,synth,rlpool >"$work/log" 2>&1 ||
  { cat "$work/log"; fail "make_tiny --steps split,synth,rlpool exited non-zero"; }
w=$work/w
n=$(grep -c . "$w/rl_tasks.jsonl" || true)
[[ $n -eq 8 ]] || fail "$n RL tasks, not 8"
# One field of every line: "id" or "reference" (a JSON string, escapes kept), sorted; nothing
# when no line has it (the counts below say so).
field() { { grep -o "\"$1\":\"\\([^\"\\\\]\\|\\\\.\\)*\"" "$2" || true; } | sort -u; }
for f in id reference; do
  field $f "$w/rl_tasks.jsonl" >"$work/rl.$f"
  [[ $(grep -c . "$work/rl.$f") -eq 8 ]] || fail "the RL tasks' ${f}s are not 8 distinct values"
  for other in builtin_heldout builtin_train synth; do
    common=$(field $f "$w/$other.jsonl" | comm -12 - "$work/rl.$f")
    [[ -z $common ]] || fail "an RL task shares its $f with $other.jsonl: $common"
  done
done
grep -q '"provenance":"synth:' "$w/rl_tasks.jsonl" || fail "the RL tasks are not synthesized"

# Without the corpus's tasks there is nothing to exclude: a clear error, not a pool.
mkdir -p "$work/empty"
if "$root/deploy/make_tiny.sh" --kforge "$kforge" --work "$work/empty" --model "$work/model" \
  --steps rlpool >"$work/log2" 2>&1; then
  fail "rlpool without synth.jsonl succeeded"
fi
grep -q "rlpool needs the synth step's" "$work/log2" || { cat "$work/log2"; fail "no message naming the missing file"; }
echo "ok: 8 RL tasks, none held out or in the corpus; rlpool without synth.jsonl refused"

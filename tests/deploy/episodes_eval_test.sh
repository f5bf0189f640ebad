#!/usr/bin/env bash
# deploy/episodes_eval.sh spends the same budget on both sides: E episodes of up to T turns
# (kforge optimize --samples E --turns T) against E x T single-shot samples (kforge sample), both
# checked on the same input seed, and compares them per task (--best-of-task) and per candidate.
# Bad arguments stop it before anything runs. A fake kforge records how it was called (the real
# commands are tested on their own; this is the script's wiring, in a second).
#   episodes_eval_test.sh REPO_ROOT
set -uo pipefail
root=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cat >"$work/kforge" <<'FAKE'
#!/usr/bin/env bash
echo "$*" >>"$(dirname "$0")/calls"
arg() { local want=$1; shift; while [[ $# -gt 1 ]]; do [[ $1 == "$want" ]] && { echo "$2"; return; }; shift; done; }
case $1 in
  sample) mkdir -p "$(arg --out "$@")" && echo '{}' >"$(arg --out "$@")/tasks.jsonl" ;;
  eval) echo '{"task":"t","status":"ok","speedup":1.5}' >"$(arg --out "$@")" ;;
  optimize) mkdir -p "$(arg --out "$@")" &&
    echo '{"task":"t","status":"ok","speedup":1.2,"episode":0,"turn":1}' >"$(arg --out "$@")/verdicts.jsonl" ;;
  compare) echo "compared $2 $3" ;;
esac
FAKE
chmod +x "$work/kforge"
echo '{"id": "t"}' >"$work/tasks.jsonl"
ee() { "$root/deploy/episodes_eval.sh" --kforge "$work/kforge" --model M --tasks "$work/tasks.jsonl" "$@"; }

ee --out "$work/a" --episodes 2 --turns 4 --seed 7 --gpu 0 >"$work/log" 2>&1 || { cat "$work/log"; fail "the run failed"; }
calls=$(cat "$work/calls")
grep -q -- "^sample .*--samples 8 " <<<"$calls" || fail "single-shot is not 2 x 4 samples: $calls"
grep -q -- "^eval .*--seed 7" <<<"$calls" || fail "single-shot not judged on input seed 7: $calls"
grep -q -- "^optimize .*--turns 4 --samples 2 .*--seed 7 " <<<"$calls" || fail "episodes are not 2 of up to 4 turns, seed 7: $calls"
grep -q -- "--feedback compile,resources,correctness,runtime,timing" <<<"$calls" || fail "the default feedback: $calls"
grep -q -- "^optimize .*--compile-only" <<<"$calls" && fail "--compile-only with a GPU"
grep -q -- "^compare $work/a/single-shot/verdicts.jsonl $work/a/episodes/verdicts.jsonl --best-of-task" <<<"$calls" ||
  fail "no per-task comparison: $calls"
[[ -s $work/a/compare-best.txt && -s $work/a/compare-samples.txt ]] || fail "the comparisons were not written"
grep -q "<polyline" "$work/a/chart.svg" 2>/dev/null || { cat "$work/log"; fail "no chart of the two sides"; }

rm "$work/calls"
ee --out "$work/a" >"$work/log" 2>&1 && fail "a second run into the same --out was accepted"
grep -q "exists: give a new --out" "$work/log" || { cat "$work/log"; fail "no message naming the used --out"; }
ee --out "$work/b" --turns 0 >"$work/log" 2>&1 && fail "--turns 0 accepted"
grep -q "positive count, not '0'" "$work/log" || { cat "$work/log"; fail "no message naming --turns 0"; }
ee --out "$work/b" --gpu cuda >"$work/log" 2>&1 && fail "--gpu cuda accepted"
grep -q "CUDA ordinal or -1, not 'cuda'" "$work/log" || { cat "$work/log"; fail "no message naming --gpu cuda"; }
[[ ! -e $work/calls ]] || fail "kforge ran for bad arguments: $(cat "$work/calls")"
ee --out "$work/c" --gpu -1 --episodes 1 --turns 1 >"$work/log" 2>&1 || { cat "$work/log"; fail "the CPU run failed"; }
grep -q -- "^optimize .*--compile-only" "$work/calls" || fail "no --compile-only without a GPU: $(cat "$work/calls")"
echo "episodes_eval: ok"

#!/usr/bin/env bash
# deploy/heldout_eval.sh in halves (CPU, seconds): --only sample writes the samples and no verdicts,
# --only eval then judges those samples (compile-only here: no GPU) and writes one verdict per
# sample, so sets sampled together and judged one after another give the whole measure's files;
# samples whose sampling did not finish are not judged.
# An eval half with no samples, and an unknown --only, stop with a message naming the problem.
#   heldout_eval_only_test.sh KFORGE_BINARY REPO_ROOT
set -euo pipefail
kforge=$1 root=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
he() { "$root/deploy/heldout_eval.sh" --kforge "$kforge" --model "$root/models/kforge-tiny" --gpu -1 \
  --samples 2 --max-new-tokens 24 "$@"; }

head -1 "$root/models/kforge-tiny/heldout_tasks.jsonl" >"$work/one.jsonl"
he --tasks "$work/one.jsonl" --out "$work/m" --only sample >"$work/log" 2>&1 || { cat "$work/log"; fail "--only sample"; }
[[ -f $work/m/samples/tasks.jsonl && -f $work/m/sampled.ok ]] || fail "--only sample wrote no samples"
[[ ! -e $work/m/verdicts.jsonl ]] || fail "--only sample wrote verdicts"
he --tasks "$work/one.jsonl" --out "$work/m" --only eval >"$work/log" 2>&1 || { cat "$work/log"; fail "--only eval"; }
n=$(grep -c . "$work/m/verdicts.jsonl" || true)
[[ $n -eq 2 ]] || fail "$n verdicts for 2 samples"
grep -q "kforge sample took" "$work/log" && fail "--only eval sampled again"

if he --tasks "$work/one.jsonl" --out "$work/empty" --only eval >"$work/log" 2>&1; then fail "eval without samples succeeded"; fi
grep -q "no complete samples in $work/empty/samples" "$work/log" || { cat "$work/log"; fail "no message naming the missing samples"; }
# A sample half that failed (its samples cut short) is not judged.
mkdir -p "$work/cut/samples" && cp "$work/m/samples/tasks.jsonl" "$work/cut/samples/"
if he --tasks "$work/one.jsonl" --out "$work/cut" --only eval >"$work/log" 2>&1; then fail "eval of unfinished samples succeeded"; fi
if he --tasks "$work/one.jsonl" --out "$work/m" --only both2 >"$work/log" 2>&1; then fail "--only both2 accepted"; fi
grep -q "takes sample or eval, not 'both2'" "$work/log" || { cat "$work/log"; fail "no message naming the bad --only"; }
echo "heldout_eval --only: ok"

#!/usr/bin/env bash
# A model measured on held-out tasks: G samples per task (kforge sample), every
# sample through the sandbox (kforge eval). The measure make_tiny.sh's heldout step and the
# demonstration's before/after (gpu-host.sh demobefore, demoafter) share.
#   deploy/heldout_eval.sh --kforge BIN --model DIR --out DIR [--tasks FILE] [--gpu N]
#                          [--samples 8] [--max-new-tokens 3072] [--eval-seed 1] [--sample-seed 0]
#                          [--only sample|eval]
# --model: an HF-style checkpoint directory (models/kforge-tiny, or a run's checkpoints/step-N).
# --tasks: default models/kforge-tiny/heldout_tasks.jsonl (the 57 held-out built-ins).
# --gpu -1: CPU sampling and a compile-only eval (nothing runs: no pass rate). Writes OUT/samples/,
# OUT/verdicts.jsonl (one line per sample: compare two with `kforge compare`) and
# OUT/eval_summary.json. --sample-seed (kforge sample's --seed, default 0) draws another set of G
# samples: the verdicts of several sets, concatenated, give `kforge compare` more samples a task
# (its bootstrap is over tasks; each task's pass rate is then over all its samples), for a measure
# less noisy than one set of 8. The eval's input seed is fixed (--eval-seed, default 1), so two models
# measured with it are checked on the same inputs. A task's samples share those inputs, so a
# sample that repeats an earlier one's source gets its verdict ("reused"; kforge eval
# --reuse-repeats) instead of being compiled, checked and timed again: the same verdict but for
# timing noise: v12's eval took 97 s instead of 181 s, every status the same (2026-12-03).
# Measures recorded before 2026-12-03 timed every repeat.
# --only sample / --only eval: one half, so that several sets can be sampled at once (the sampler
# leaves most of the GPU idle) and then judged one after another (timing wants the GPU alone):
# the same commands as the whole measure, so the same protocol.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
kforge= model= out= tasks=$root/models/kforge-tiny/heldout_tasks.jsonl gpu=0 samples=8 max_new=3072 seed=1 sample_seed=0 only=both
while [[ $# -gt 0 ]]; do
  case $1 in
    --kforge) kforge=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --tasks) tasks=$2; shift 2 ;;
    --gpu) gpu=$2; shift 2 ;;
    --samples) samples=$2; shift 2 ;;
    --max-new-tokens) max_new=$2; shift 2 ;;
    --eval-seed) seed=$2; shift 2 ;;
    --sample-seed) sample_seed=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    *) echo "heldout_eval: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -n $kforge && -n $model && -n $out ]] ||
  { echo "heldout_eval: --kforge, --model and --out are required" >&2; exit 2; }
[[ -f $tasks ]] || { echo "heldout_eval: no task file $tasks" >&2; exit 2; }
[[ $only == both || $only == sample || $only == eval ]] ||
  { echo "heldout_eval: --only takes sample or eval, not '$only'" >&2; exit 2; }
gpu_args=() eval_args=()
if [[ $gpu -ge 0 ]]; then gpu_args=(--gpu "$gpu"); eval_args=(--gpus "$gpu"); else eval_args=(--compile-only); fi
if [[ $only != eval ]]; then
  rm -rf "$out/samples" "$out/sampled.ok" "$out/verdicts.jsonl" "$out/eval_summary.json"  # nothing left from an earlier measure
  mkdir -p "$out"
  t0=$SECONDS
  "$kforge" sample --model "$model" --tasks "$tasks" --out "$out/samples" --samples "$samples" \
    --max-new-tokens "$max_new" --seed "$sample_seed" "${gpu_args[@]}"
  echo "heldout_eval: kforge sample took $((SECONDS - t0)) s" >&2
  # kforge sample writes tasks.jsonl first: only this says every sample was written.
  touch "$out/sampled.ok"
fi
[[ $only == sample ]] && exit 0
[[ -f $out/sampled.ok ]] ||
  { echo "heldout_eval: no complete samples in $out/samples (run --only sample first, and see that it succeeds)" >&2; exit 2; }
rm -f "$out/verdicts.jsonl" "$out/eval_summary.json"
t0=$SECONDS
"$kforge" eval --tasks "$out/samples/tasks.jsonl" --candidates "$out/samples" \
  --out "$out/verdicts.jsonl" --summary "$out/eval_summary.json" --seed "$seed" --reuse-repeats "${eval_args[@]}"
echo "heldout_eval: kforge eval took $((SECONDS - t0)) s" >&2

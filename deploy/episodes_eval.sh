#!/usr/bin/env bash
# Episodes against single-shot at an equal sandbox budget: does a model do better iterating on its
# kernel with the sandbox's feedback than drawing as many independent samples?
#   deploy/episodes_eval.sh --kforge BIN --model DIR --out DIR [--tasks FILE] [--gpu N]
#                           [--episodes 3] [--turns 3] [--max-new-tokens 3072] [--seed 1]
#                           [--feedback compile,resources,correctness,runtime,timing]
# Per task, E episodes of up to T turns (`kforge optimize`) against E x T single-shot samples
# (deploy/heldout_eval.sh), so each side judges at most E x T candidates. --seed: the input seed of
# both sides' checks and the episodes' sampling seed (single-shot samples draw with kforge sample's
# seed 0, as heldout_eval.sh's other measures do). --tasks: default the 57 held-out built-ins. --feedback: what the observations
# show (`kforge optimize --feedback`; the default leaves out Nsight Compute profiles, 2-4 s of
# exclusive GPU each). --gpu -1: the model on the CPU and a compile-only sandbox (a check of the
# commands; nothing runs, so no pass rate).
# Writes OUT/single-shot/ and OUT/episodes/ (each with verdicts.jsonl), and OUT/compare-best.txt
# (`kforge compare --best-of-task`: a task passes when any of its candidates is correct, at its
# best speedup; the figure the equal budget is about), OUT/compare-samples.txt (per candidate) and
# OUT/chart.svg (both sides against the candidates spent, bench/episodes_chart.py).
# Two models' OUT/episodes/verdicts.jsonl compare the same way (`kforge compare A B --best-of-task`).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
kforge= model= out= tasks=$root/models/kforge-tiny/heldout_tasks.jsonl gpu=0 episodes=3 turns=3 max_new=3072 seed=1
feedback=compile,resources,correctness,runtime,timing
while [[ $# -gt 0 ]]; do
  case $1 in
    --kforge) kforge=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --tasks) tasks=$2; shift 2 ;;
    --gpu) gpu=$2; shift 2 ;;
    --episodes) episodes=$2; shift 2 ;;
    --turns) turns=$2; shift 2 ;;
    --max-new-tokens) max_new=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --feedback) feedback=$2; shift 2 ;;
    *) echo "episodes_eval: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -n $kforge && -n $model && -n $out ]] ||
  { echo "episodes_eval: --kforge, --model and --out are required" >&2; exit 2; }
[[ -f $tasks ]] || { echo "episodes_eval: no task file $tasks" >&2; exit 2; }
[[ $gpu =~ ^-?[0-9]+$ ]] || { echo "episodes_eval: --gpu takes a CUDA ordinal or -1, not '$gpu'" >&2; exit 2; }
for n in "$episodes" "$turns"; do
  [[ $n =~ ^[1-9][0-9]*$ ]] || { echo "episodes_eval: --episodes and --turns take a positive count, not '$n'" >&2; exit 2; }
done
[[ -e $out/episodes ]] && { echo "episodes_eval: $out/episodes exists: give a new --out" >&2; exit 2; }
mkdir -p "$out"

t0=$SECONDS
"$root/deploy/heldout_eval.sh" --kforge "$kforge" --model "$model" --out "$out/single-shot" --tasks "$tasks" \
  --gpu "$gpu" --samples $((episodes * turns)) --max-new-tokens "$max_new" --eval-seed "$seed"
echo "episodes_eval: single-shot, $((episodes * turns)) samples a task, took $((SECONDS - t0)) s" >&2

t0=$SECONDS
optimize_args=()
[[ $gpu -ge 0 ]] || optimize_args=(--compile-only)
"$kforge" optimize --model "$model" --tasks "$tasks" --turns "$turns" --samples "$episodes" \
  --max-new-tokens "$max_new" --seed "$seed" --reuse-repeats --gpu "$gpu" --feedback "$feedback" \
  --out "$out/episodes" "${optimize_args[@]}"
echo "episodes_eval: episodes, $episodes of up to $turns turns a task, took $((SECONDS - t0)) s" >&2

"$kforge" compare "$out/single-shot/verdicts.jsonl" "$out/episodes/verdicts.jsonl" --best-of-task |
  tee "$out/compare-best.txt"
"$kforge" compare "$out/single-shot/verdicts.jsonl" "$out/episodes/verdicts.jsonl" >"$out/compare-samples.txt"
# Both sides against the budget spent (bench/episodes_chart.py); a chart that cannot be drawn costs
# nothing of the measure above.
python3 "$root/bench/episodes_chart.py" --out "$out/chart.svg" --episodes "episodes=$out/episodes/verdicts.jsonl" \
  --single-shot "single-shot=$out/single-shot/verdicts.jsonl" >/dev/null ||
  echo "episodes_eval: no chart: the message above says why" >&2

#!/usr/bin/env bash
# torch.compile against eager on a task file (KernelBench's imported problems), on a GPU host:
#   bench/kernelbench_compile.sh TASKS.jsonl OUT.jsonl [--warmers N] [--mode MODE] [--time-limit S]
#                                [--warm-time S]
# First N processes (default 6; 1 for the autotuning modes) compile every task in parallel into one inductor cache, their
# times thrown away: compiling 184 problems one after another takes far longer than timing them.
# --warm-time bounds that phase (for a run with a deadline): the warmers are stopped after S
# seconds, and a task they did not reach is compiled when it is measured.
# Then tasks/baselines/measure_baselines.py measures every task alone on the idle GPU (30 trials
# alternating eager and compiled, L2 flushed before each), reading the warm cache: the tasks that
# warmed first, then those whose warming failed, ran out of time or was not reached (a compile of
# minutes, an RNN's, would otherwise hold up every task after it; 2026-12-07). OUT.jsonl gets a
# line per task as it goes, so a run cut short keeps what it measured.
# Modes that autotune (max-autotune, max-autotune-no-cudagraphs) warm with one process only: their
# compile times candidate kernels on the GPU, and parallel warmers would time them against each
# other and cache the choices made under that contention (2026-12-07, 12 warmers: max-autotune came
# out slower than default on 14 of 16 GEMM and convolution problems).
# Measured this way: bench/data/2026-12-06-kernelbench-compile-h100/ (184 problems in 196 s).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
[[ $# -ge 2 ]] || { sed -n 2,4p "$0" >&2; exit 2; }
tasks=$1 out=$2
shift 2
warmers= mode=default limit=60 warm_time=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --warmers) warmers=$2; shift 2 ;;
    --mode) mode=$2; shift 2 ;;
    --time-limit) limit=$2; shift 2 ;;
    --warm-time) warm_time=$2; shift 2 ;;
    *) echo "kernelbench_compile: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -f $tasks ]] || { echo "kernelbench_compile: $tasks: no such file" >&2; exit 2; }
[[ -n $warmers ]] || { [[ $mode == *autotune* ]] && warmers=1 || warmers=6; }
[[ $warmers =~ ^[1-9][0-9]*$ ]] || { echo "kernelbench_compile: --warmers $warmers: a count of 1 or more" >&2; exit 2; }
if [[ $mode == *autotune* && $warmers -gt 1 ]]; then
  echo "kernelbench_compile: --mode $mode times kernels while compiling; with $warmers warmers they would be timed" \
    "against each other: use --warmers 1" >&2
  exit 2
fi
python=${KFORGE_PYTHON:-python3}
script=$root/tasks/baselines/measure_baselines.py
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-$work/inductor-cache}
# Round robin: a task file groups its large problems (a level, a family), and one shard holding
# them all would outlast the others.
split -n "r/$warmers" -d "$tasks" "$work/shard."
bound=()
[[ $warm_time != 0 ]] && bound=(timeout "$warm_time")
for f in "$work"/shard.*; do
  "${bound[@]}" "$python" "$script" "$f" --out "$f.warm.jsonl" --mode "$mode" --trials 1 --rounds 1 --warmup 0 \
    --time-limit "$limit" >"$f.log" 2>&1 &
done
wait || true  # a shard with a failing task still warmed the others
echo "kernelbench_compile: caches warmed by $warmers processes; measuring each task alone" >&2
warmed=()
for f in "$work"/shard.*.warm.jsonl; do [[ -f $f ]] && warmed+=("$f"); done
"$python" "$script" "$tasks" --out "$out" --mode "$mode" --time-limit "$limit" ${warmed[@]:+--warmed "${warmed[@]}"}

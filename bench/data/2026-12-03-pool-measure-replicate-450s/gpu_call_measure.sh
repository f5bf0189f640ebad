#!/usr/bin/env bash
# The held-out measure of one checkpoint on several sample sets (57 tasks x 8, T 0.8, eval seed 1;
# sample seeds 0, 1, 2 by default), each set and all of them pooled against v14's recorded sets of
# the same seeds (seed 0: bench/data/2026-12-03-tiny-v14-default-run-355s; seeds 1 and 2:
# bench/data/2026-12-03-pool-measure-replicate-450s): the measure of the rule in bench/RESULTS.md
# (the pooled measure and the replicate 450 s run, 2026-12-03). Only the checkpoint is sampled
# and judged. Run from the repository root on the GPU host with .gpu-deps.tar.xz carried; builds
# kforge unless the machine holds a build of the same sources.
#   KFORGE_AFTER   checkpoint directory (default, bf16:
#                  bench/data/2026-12-03-pool-measure-replicate-450s/checkpoint-replicate-step22)
#   KFORGE_SEEDS   sample seeds (default "0 1 2"; v14's sets exist for these three)
#   KFORGE_MEASURE_UNTIL  seconds into the call by which judging must end (default 570): a set is
#                  judged only when its ~115 s fit
# Every set is sampled at once (a 7.6 M model leaves the GPU mostly idle), then judged one after
# another (timing wants the GPU alone). Files back: measure.log, compare_pooled.json, measure.tar.gz.
set -u
start=$SECONDS
final=${OUT:-$PWD/gpu-out}
mkdir -p "$final"
after=${KFORGE_AFTER:-bench/data/2026-12-03-pool-measure-replicate-450s/checkpoint-replicate-step22}
seeds=${KFORGE_SEEDS:-0 1 2}
k=build-gpu/kforge m=build-gpu/measure
v14_set() {  # v14's recorded verdicts of sample seed $1
  case $1 in
    0) echo bench/data/2026-12-03-tiny-v14-default-run-355s/v14_heldout_verdicts.jsonl.gz ;;
    *) echo bench/data/2026-12-03-pool-measure-replicate-450s/v14_heldout_verdicts_s$1.jsonl.gz ;;
  esac
}
{
  sha256sum "$after"/model.safetensors
  for s in $seeds; do [[ -f $(v14_set "$s") ]] || { echo "measure: no v14 set for seed $s"; exit 2; }; done
  OUT=$PWD/build-gpu/out-measure KFORGE_REUSE_BUILD=1 KFORGE_TARGETS=kforge KFORGE_STEPS=none deploy/gpu-host.sh
  [[ -x $k ]] || { echo "measure: no kforge build"; exit 3; }
  export PATH=$PWD/.gpu-deps/bin:/usr/local/cuda/bin:$PATH
  export LD_LIBRARY_PATH=$PWD/.gpu-deps/lib:$(python3 -c "import torch,os;print(os.path.dirname(torch.__file__))")/lib
  pids=()
  for s in $seeds; do
    deploy/heldout_eval.sh --kforge $k --model "$after" --out $m/s$s --sample-seed $s --only sample &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || echo "a sampler failed (exit $?): its set is not judged"; done
  echo "sampled at $((SECONDS - start)) s"
  judged=
  for s in $seeds; do
    if ((SECONDS - start > ${KFORGE_MEASURE_UNTIL:-570} - 115)); then echo "no time left to judge seed $s"; continue; fi
    deploy/heldout_eval.sh --kforge $k --model "$after" --out $m/s$s --sample-seed $s --only eval
    echo "seed $s judged at $((SECONDS - start)) s"
    [[ -s $m/s$s/verdicts.jsonl ]] || continue
    gunzip -c "$(v14_set "$s")" >$m/v14-s$s.jsonl
    cp $m/s$s/verdicts.jsonl $m/after-s$s.jsonl
    echo "== seed $s alone"; $k compare $m/v14-s$s.jsonl $m/after-s$s.jsonl --json $m/compare_s$s.json
    judged="$judged $s"
  done
  for s in $judged; do cat $m/v14-s$s.jsonl; done >$m/v14-pooled.jsonl
  for s in $judged; do cat $m/after-s$s.jsonl; done >$m/after-pooled.jsonl
  echo "== pooled seeds:$judged"; $k compare $m/v14-pooled.jsonl $m/after-pooled.jsonl --json $m/compare_pooled.json
} >"$final/measure.log" 2>&1
cp $m/compare_pooled.json "$final/" 2>/dev/null
(cd build-gpu && tar czf "$final/measure.tar.gz" measure/compare_s*.json measure/after-s*.jsonl 2>/dev/null)
tail -45 "$final/measure.log"; echo "measure call took $((SECONDS - start)) s"

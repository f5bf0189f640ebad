#!/usr/bin/env bash
# More sets of 8 samples per held-out task for a checkpoint and for v14 (the shipped
# models/kforge-tiny), pooled by seed against their seed-0 sets: the pooled measure of the rule in
# bench/RESULTS.md (the 2026-12-03 pool run, 450 s). Run from the repository root on the GPU host
# with .gpu-deps carried; builds kforge unless the machine holds a build of the same sources.
#   KFORGE_AFTER   checkpoint directory (default bench/data/2026-12-03-pool-run-450s/checkpoint-step22,
#                  the pool run's 450 s checkpoint, bf16: the GPU sampler loads weights in bf16,
#                  so sampling is unchanged)
#   KFORGE_AFTER0  its seed-0 verdicts (default bench/data/2026-12-03-pool-run-450s/after_step22_verdicts.jsonl.gz)
#   KFORGE_SEEDS   sample seeds to add (default "1 2")
#   KFORGE_SETS_UNTIL  seconds into the call by which the judging must end (default 560): a seed's
#                  pair is judged only when both sets' ~115 s each fit (a lone set cannot be pooled)
# Every set is sampled at once (a 7.6 M model leaves the GPU mostly idle), then judged one after
# another (timing wants the GPU alone). Only seeds judged for both models are pooled.
set -u
start=$SECONDS
final=${OUT:-$PWD/gpu-out}
mkdir -p "$final"
# The default checkpoint is no longer in the tree: commit 2c2c2f0 holds it (under this folder's
# earlier name); restore it from there and set KFORGE_AFTER, or put it at the default path.
after=${KFORGE_AFTER:-bench/data/2026-12-03-pool-run-450s/checkpoint-step22}
after0=${KFORGE_AFTER0:-bench/data/2026-12-03-pool-run-450s/after_step22_verdicts.jsonl.gz}
seeds=${KFORGE_SEEDS:-1 2}
k=build-gpu/kforge sets=build-gpu/sets
{
  sha256sum "$after"/model.safetensors models/kforge-tiny/model.safetensors
  OUT=$PWD/build-gpu/out-sets KFORGE_REUSE_BUILD=1 KFORGE_TARGETS=kforge KFORGE_STEPS=none deploy/gpu-host.sh
  [[ -x $k ]] || { echo "sets: no kforge build"; exit 3; }
  export PATH=$PWD/.gpu-deps/bin:/usr/local/cuda/bin:$PATH
  export LD_LIBRARY_PATH=$PWD/.gpu-deps/lib:$(python3 -c "import torch,os;print(os.path.dirname(torch.__file__))")/lib
  pids=()
  for s in $seeds; do
    deploy/heldout_eval.sh --kforge $k --model "$after" --out $sets/after-s$s --sample-seed $s --only sample &
    pids+=($!)
    deploy/heldout_eval.sh --kforge $k --model models/kforge-tiny --out $sets/v14-s$s --sample-seed $s --only sample &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || echo "a sampler failed (exit $?): its seed is not judged"; done
  echo "sampled at $((SECONDS - start)) s"
  for s in $seeds; do
    if ((SECONDS - start > ${KFORGE_SETS_UNTIL:-560} - 2 * 115)); then echo "no time left to judge seed $s"; continue; fi
    for m in after v14; do
      model=$after; [[ $m == v14 ]] && model=models/kforge-tiny
      deploy/heldout_eval.sh --kforge $k --model "$model" --out $sets/$m-s$s --sample-seed $s --only eval
      echo "$m-s$s judged at $((SECONDS - start)) s"
    done
  done
  gunzip -c bench/data/2026-12-03-tiny-v14-default-run-355s/v14_heldout_verdicts.jsonl.gz >$sets/v14-s0.jsonl
  gunzip -c "$after0" >$sets/after-s0.jsonl
  pooled=0
  for s in $seeds; do
    [[ -s $sets/after-s$s/verdicts.jsonl && -s $sets/v14-s$s/verdicts.jsonl ]] || continue
    cp $sets/after-s$s/verdicts.jsonl $sets/after-s$s.jsonl; cp $sets/v14-s$s/verdicts.jsonl $sets/v14-s$s.jsonl
    echo "== seed $s alone"; $k compare $sets/v14-s$s.jsonl $sets/after-s$s.jsonl --json $sets/compare_s$s.json
    pooled="$pooled $s"
  done
  for s in $pooled; do cat $sets/v14-s$s.jsonl; done >$sets/v14-pooled.jsonl
  for s in $pooled; do cat $sets/after-s$s.jsonl; done >$sets/after-pooled.jsonl
  echo "== pooled seeds: $pooled"; $k compare $sets/v14-pooled.jsonl $sets/after-pooled.jsonl --json $sets/compare_pooled.json
} >"$final/sets.log" 2>&1
cp $sets/compare_pooled.json "$final/" 2>/dev/null
(cd build-gpu && tar czf "$final/sets.tar.gz" sets/compare_s*.json sets/after-s*.jsonl sets/v14-s*.jsonl 2>/dev/null)
tail -45 "$final/sets.log"; echo "sets call took $((SECONDS - start)) s"

#!/usr/bin/env bash
# Session 22, device call 3 of 3, on the machine call 2 left warm: more sets of 8 samples for the
# run's last checkpoint and for v14 (sample seeds 1 and 2, eval seed 1 as before). All four sets are
# sampled at once (a 7.6 M model leaves the GPU mostly idle), then judged one after another (the
# timing wants the GPU alone). A set is judged only while the call has time for it
# (KFORGE_SETS_UNTIL, default 560 s into the call, less the ~110 s a set takes); sets are pooled per model by seed, pairs only.
set -u
start=$SECONDS
final=${OUT:-$PWD/gpu-out}
mkdir -p "$final"
k=build-gpu/kforge
last= n=-1  # the newest complete checkpoint, the one call 2 measured (gpu-host.sh's demo_checkpoint)
for d in build-gpu/demo/run/checkpoints/step-*; do
  i=${d##*/step-}
  [[ $i =~ ^[0-9]+$ && -f $d/model.safetensors && -f $d/trainer_state.json ]] && ((i > n)) && { n=$i; last=$d; }
done
[[ -x $k && -n $last && -s build-gpu/demo/after/verdicts.jsonl ]] ||
  { echo "call c: no run or after-measure on this machine" | tee "$final/call_c.log"; exit 3; }
export PATH=$PWD/.gpu-deps/bin:/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=$PWD/.gpu-deps/lib:$(python3 -c "import torch,os;print(os.path.dirname(torch.__file__))")/lib
sets=build-gpu/sets
{
  echo "after = $last"
  for s in 1 2; do
    deploy/heldout_eval.sh --kforge $k --model "$last" --out $sets/after-s$s --sample-seed $s --only sample &
    deploy/heldout_eval.sh --kforge $k --model models/kforge-tiny --out $sets/v14-s$s --sample-seed $s --only sample &
  done
  wait
  echo "sampled at $((SECONDS - start)) s"
  for s in 1 2; do
    for m in after v14; do
      if ((SECONDS - start > ${KFORGE_SETS_UNTIL:-560} - 110)); then echo "no time left for $m-s$s"; continue; fi
      model=$last; [[ $m == v14 ]] && model=models/kforge-tiny
      deploy/heldout_eval.sh --kforge $k --model "$model" --out $sets/$m-s$s --sample-seed $s --only eval
      echo "$m-s$s judged at $((SECONDS - start)) s"
    done
  done
  gunzip -c bench/data/s18/v14_heldout_verdicts.jsonl.gz >$sets/v14-s0.jsonl
  cp build-gpu/demo/after/verdicts.jsonl $sets/after-s0.jsonl
  seeds=0
  for s in 1 2; do
    [[ -s $sets/after-s$s/verdicts.jsonl && -s $sets/v14-s$s/verdicts.jsonl ]] || continue
    cp $sets/after-s$s/verdicts.jsonl $sets/after-s$s.jsonl; cp $sets/v14-s$s/verdicts.jsonl $sets/v14-s$s.jsonl
    $k compare $sets/v14-s$s.jsonl $sets/after-s$s.jsonl --json $sets/compare_s$s.json
    seeds="$seeds $s"
  done
  echo "pooled seeds: $seeds"
  for s in $seeds; do cat $sets/v14-s$s.jsonl; done >$sets/v14-pooled.jsonl
  for s in $seeds; do cat $sets/after-s$s.jsonl; done >$sets/after-pooled.jsonl
  $k compare $sets/v14-pooled.jsonl $sets/after-pooled.jsonl --json $sets/compare_pooled.json
} >"$final/call_c.log" 2>&1
cp $sets/compare_pooled.json "$final/" 2>/dev/null
tar czf "$final/c_sets.tar.gz" -C build-gpu sets 2>/dev/null
tail -40 "$final/call_c.log"

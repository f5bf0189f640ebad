#!/usr/bin/env bash
# torch.compile baselines of the imported KernelBench tasks: compile caches warmed by 12 parallel
# processes (their times discarded), then every task measured alone on the idle GPU.
cd "$(dirname "$0")"
export TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-cache
t0=$SECONDS
python3 -c "import torch;print(torch.__version__, torch.cuda.get_device_name(0))"
split -n l/6 -d kb.jsonl shard.
for f in shard.*; do timeout 110 python3 measure_baselines.py $f --out /tmp/warm.$f --trials 1 --rounds 1 --warmup 0 --time-limit 60 > /tmp/warm.$f.log 2>&1 & done
wait
echo "warm done $((SECONDS-t0))s: $(cat /tmp/warm.shard.?? 2>/dev/null | grep -c '"ok": true') ok of $(cat /tmp/warm.shard.?? 2>/dev/null | wc -l)"
timeout 150 python3 measure_baselines.py kb.jsonl --out $OUT/kb_compile_h100.jsonl --time-limit 60 > $OUT/measure.log 2>&1
echo "measure rc=$? $((SECONDS-t0))s: $(wc -l < $OUT/kb_compile_h100.jsonl) lines, $(grep -c '"ok": true' $OUT/kb_compile_h100.jsonl) ok"
tail -3 $OUT/measure.log

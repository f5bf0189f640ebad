#!/usr/bin/env bash
# The held-out measure (57 tasks x 8, T 0.8, sample seed 0, eval seed 1: one set) of the checkpoint
# run_and_keep_checkpoint.sh brought back, carried as .carried-ckpt/step-N, against v14's recorded
# measure. Builds unless the machine still holds that call's build of the same sources.
# Unpack here first: mkdir -p .carried-ckpt && tar xzf ckpt_small.tar.gz -C .carried-ckpt, then
# ckpt_model.safetensors as .carried-ckpt/step-N/model.safetensors (tokenizer.json: v14's, copied below).
set -u
start=$SECONDS
final=${OUT:-$PWD/gpu-out}
mkdir -p "$final"
ck=$(ls -d .carried-ckpt/step-* 2>/dev/null | head -1)
[[ -n $ck && -d $ck ]] || { echo "call e: no checkpoint under .carried-ckpt" | tee "$final/call_e.log"; exit 3; }
[[ -f $ck/model.safetensors.gz ]] && gunzip "$ck/model.safetensors.gz"  # gzipped to fit the 64 MiB carry
[[ -f $ck/tokenizer.json ]] || cp models/kforge-tiny/tokenizer.json "$ck/"
[[ -f $ck/model.safetensors ]] || { echo "call e: no checkpoint under .carried-ckpt" | tee "$final/call_e.log"; exit 3; }
export OUT=$PWD/build-gpu/out-e
mkdir -p "$OUT"
{
  sha256sum "$ck"/model.safetensors
  KFORGE_REUSE_BUILD=1 KFORGE_TARGETS=kforge KFORGE_STEPS=none deploy/gpu-host.sh
  export PATH=$PWD/.gpu-deps/bin:/usr/local/cuda/bin:$PATH
  export LD_LIBRARY_PATH=$PWD/.gpu-deps/lib:$(python3 -c "import torch,os;print(os.path.dirname(torch.__file__))")/lib
  deploy/heldout_eval.sh --kforge build-gpu/kforge --model "$ck" --out build-gpu/after
  gunzip -c bench/data/2026-12-03-tiny-v14-default-run-355s/v14_heldout_verdicts.jsonl.gz >build-gpu/v14-s0.jsonl
  build-gpu/kforge compare build-gpu/v14-s0.jsonl build-gpu/after/verdicts.jsonl --json "$final/compare.json"
} >"$final/call_e.log" 2>&1
gzip -c build-gpu/after/verdicts.jsonl >"$final/after_verdicts.jsonl.gz"
tar czf "$final/e_more.tar.gz" -C build-gpu out-e after/samples/samples.jsonl after/eval_summary.json 2>/dev/null
tail -30 "$final/call_e.log"; echo "call e took $((SECONDS - start)) s"

#!/usr/bin/env bash
# On the GPU host: kforge's LoRA adapters against Hugging Face's stack. Makes a random Qwen2 of
# Qwen2.5-1.5B's shapes (vocabulary cut to kforge-tiny's tokenizer; transformers' own
# save_pretrained), writes a LoRA adapter on every projection as the trainer writes one with B drawn
# at random (`kforge model random-adapter`), has kforge compute the logits of 64 tokens with and
# without it in fp32 and bf16 on the GPU (`kforge model logits`), and has
# deploy/check_peft_adapter.py compare them with transformers' (the adapter applied by PEFT where
# it is installed, and by the script's own merge in any case). Exit 0 when every check passes.
#   deploy/check_peft_adapter.sh [WORK_DIR]          default /tmp/kforge-peft-check (the model is kept)
# Environment: KFORGE (default build/kforge), PYTHON (default python3, with torch and transformers),
# DEVICE (default cuda), LAYERS (default 28), RANK (default 16), B_STD (default 0.02).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=${1:-/tmp/kforge-peft-check}
kforge=${KFORGE:-$root/build/kforge}
py=${PYTHON:-python3}
device=${DEVICE:-cuda}
model=$work/model adapter=$work/adapter
mkdir -p "$work"

if [[ ! -f $model/config.json ]]; then
  "$py" "$root/deploy/make_random_model.py" --out "$model" --tokenizer "$root/models/kforge-tiny" \
    --layers "${LAYERS:-28}" --hidden 1536 --heads 12 --kv-heads 2 --intermediate 8960
fi
rm -rf "$adapter"
"$kforge" model random-adapter --model "$model" --out "$adapter" --rank "${RANK:-16}" --alpha "$((2 * ${RANK:-16}))" \
  --b-std "${B_STD:-0.02}"
tokens=$(seq -s, 7 53 3390)  # 64 ids spread over the vocabulary

# How transformers gets the adapter: PEFT where it is importable, and the script's merge always.
merges=(--manual-merge)
"$py" -c "import peft" 2>/dev/null && merges=("" --manual-merge) || echo "PEFT not importable: the manual merge only"
failed=0
for dtype in float32 bfloat16; do
  for with in base adapter; do
    extra=()
    [[ $with == adapter ]] && extra=(--adapter "$adapter")
    "$kforge" model logits --model "$model" "${extra[@]}" --tokens "$tokens" --dtype "$dtype" --device "$device" \
      --out "$work/kforge-$with-$dtype.safetensors"
  done
  for merge in "${merges[@]}"; do
    echo "== $dtype, ${merge:-PEFT}"
    "$py" "$root/deploy/check_peft_adapter.py" --model "$model" --adapter "$adapter" --dtype "$dtype" \
      --device "$device" --kforge-logits "$work/kforge-adapter-$dtype.safetensors" \
      --kforge-base-logits "$work/kforge-base-$dtype.safetensors" $merge || failed=1
  done
done
((failed == 0)) && echo "check_peft_adapter: all checks passed" || { echo "check_peft_adapter: FAILED"; exit 1; }

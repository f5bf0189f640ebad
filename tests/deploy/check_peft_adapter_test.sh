#!/usr/bin/env bash
# deploy/check_peft_adapter.py's own merge (CPU, seconds, no transformers): kforge writes a random
# adapter for the fixture Qwen2, the script merges it by hand (W + scale B A) into a plain
# checkpoint, and kforge's logits of that checkpoint must be its logits of the model with the
# adapter, while a merge with a wrong scale must fail the same comparison. Where transformers is
# importable, the script's transformers check too. Needs a Python with torch; 77 without.
#   check_peft_adapter_test.sh KFORGE_BINARY REPO_ROOT [PYTHON (default /usr/bin/python3)]
set -euo pipefail
kforge=$1 root=$2
py=${3:-/usr/bin/python3}
"$py" -c "import torch" 2>/dev/null || { echo "skipped: no torch for $py"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
model=$root/tests/model/fixtures/qwen2
check=$root/deploy/check_peft_adapter.py
tokens=1,17,42,99,250,7,3,5,1,300,12,64
logits() { "$kforge" model logits --model "$1" --tokens "$tokens" --out "$2" "${@:3}" >/dev/null; }

"$kforge" model random-adapter --model "$model" --out "$work/adapter" --rank 4 --alpha 12 --b-std 0.1 >/dev/null
logits "$model" "$work/kforge.safetensors" --adapter "$work/adapter"
logits "$model" "$work/base.safetensors"
"$py" "$check" --model "$model" --adapter "$work/adapter" --write-merged "$work/merged" >/dev/null
logits "$work/merged" "$work/merged.safetensors"
compare() { "$py" "$check" --kforge-logits "$work/kforge.safetensors" --reference-logits "$1" \
  --base-logits "$work/base.safetensors" >"$work/log" 2>&1; }
compare "$work/merged.safetensors" || { cat "$work/log"; fail "the merged checkpoint's logits differ"; }
grep -q "^PASS" "$work/log" || fail "no PASS line"

# The same check on a merge with the scale doubled must fail: the comparison sees a wrong merge.
PYTHONPATH=$root/deploy "$py" - "$model" "$work/adapter" "$work/wrong" <<'PY' >/dev/null
import sys
import check_peft_adapter as c
right = c.lora_scale
c.lora_scale = lambda config: 2 * right(config)
c.write_merged(*sys.argv[1:4])
PY
logits "$work/wrong" "$work/wrong.safetensors"
if compare "$work/wrong.safetensors"; then cat "$work/log"; fail "a merge with a doubled scale passed"; fi
grep -q "^FAIL" "$work/log" || fail "no FAIL line"
# Base logits as the reference: an adapter that changes nothing would pass, and must not.
"$py" "$check" --kforge-logits "$work/base.safetensors" --reference-logits "$work/base.safetensors" \
  --base-logits "$work/base.safetensors" >"$work/log" 2>&1 && { cat "$work/log"; fail "a vacuous check passed"; }
grep -q "proves nothing" "$work/log" || { cat "$work/log"; fail "no word on the vacuous check"; }

if "$py" -c "import transformers" 2>/dev/null; then
  "$py" "$check" --model "$model" --adapter "$work/adapter" --kforge-logits "$work/kforge.safetensors" \
    --kforge-base-logits "$work/base.safetensors" || fail "kforge against transformers"
else
  echo "transformers not importable: its check left to deploy/check_peft_adapter.sh"
fi
echo "check_peft_adapter: ok"

#!/usr/bin/env bash
# Checks a GPU loop run (deploy/gpu-host.sh): every training step published its new version the
# way asked (train.jsonl's "publish": nccl, file or adapters), and the samples scored in the run
# reached the last published version but one (sync mode: step s is sampled with version s): the
# proof that the versions reached the sampler and it switched to them. With adapters, also that
# each version's PEFT directory is under RUN_DIR/weights.
# Usage: deploy/check_loop_versions.sh KFORGE RUN_DIR STEPS [PUBLISH]   (PUBLISH: nccl by default)
set -euo pipefail
kforge=$1 run=$2 steps=$3 publish=${4:-nccl}
train=$run/train.jsonl
[[ -f $train ]] || { echo "check: $train missing"; exit 1; }
published=$(grep -c "\"publish\":\"$publish\"" "$train" || true)
lines=$(grep -c . "$train")
echo "check: $published of $lines steps published by $publish"
grep -o '"publish_seconds":[0-9.e-]*' "$train" | sed 's/^/check: /'
[[ $lines -ge $steps && $published -eq $lines ]] || { echo "check: FAIL: not every step went by $publish"; exit 1; }
if [[ $publish == adapters ]]; then
  dirs=$(ls -d "$run"/weights/adapter-v* 2>/dev/null | wc -l)
  echo "check: $dirs adapter directories under $run/weights"
  for d in "$run"/weights/adapter-v*; do
    [[ -f $d/adapter_config.json && -f $d/adapter_model.safetensors ]] ||
      { echo "check: FAIL: $d is not a PEFT adapter directory"; exit 1; }
  done
  [[ $dirs -ge 1 ]] || { echo "check: FAIL: no adapters published"; exit 1; }
fi
rec=$(ls "$run"/recordings/scored@*.kfrec 2>/dev/null | head -1 || true)
[[ -n $rec ]] || { echo "check: FAIL: no scored recording under $run/recordings"; exit 1; }
# kforge inspect writes `"policy_version": N` in each envelope header and each Scored payload, and
# leaves version 0 out (FlatBuffers' JSON omits default values): count the envelopes, version 0
# included, by their header's version.
versions=$("$kforge" inspect "$rec" | sed -n 's/.*"send_time_ns": *[0-9]*, *"policy_version": *\([0-9]*\).*/\1/p; t; s/.*/0/p' |
  sort -n | uniq -c)
echo "check: scored samples per policy version (count version):"; echo "$versions"
top=$(echo "$versions" | awk '{v=$2} END {print v+0}')
[[ $top -ge $((steps - 1)) ]] || { echo "check: FAIL: newest sample version $top < $((steps - 1))"; exit 1; }
echo "check: ok"

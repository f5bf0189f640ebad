#!/usr/bin/env bash
# Checks a run of deploy/manifests/gpu_loop_nccl.toml: every training step published its weights
# by NCCL (train.jsonl's "publish"; that a broadcast started, and the one before it ended), and the
# samples scored in the run reached the last published version but one (sync mode: step s is
# sampled with version s): the proof that the broadcasts reached the sampler process and it
# switched to them.
# Usage: deploy/check_nccl_loop.sh KFORGE RUN_DIR STEPS
set -euo pipefail
kforge=$1 run=$2 steps=$3
train=$run/train.jsonl
[[ -f $train ]] || { echo "check: $train missing"; exit 1; }
nccl=$(grep -c '"publish":"nccl"' "$train" || true)
lines=$(grep -c . "$train")
echo "check: $nccl of $lines steps published by NCCL"
grep -o '"publish_seconds":[0-9.e-]*' "$train" | sed 's/^/check: /'
[[ $lines -ge $steps && $nccl -eq $lines ]] || { echo "check: FAIL: not every step went by NCCL"; exit 1; }
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

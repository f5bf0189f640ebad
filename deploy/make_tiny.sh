#!/usr/bin/env bash
# How kforge-tiny is made, start to end, and how it is measured on held-out tasks. Each step is a
# kforge command, so the recipe is the record: rerun it with the same arguments for the same corpus
# and (on the same device) the same weights.
#
#   1. tasks:      kforge tasks synth --exclude builtin  (synthesized tasks; none shares a signature,
#                  reference or op skeleton with a built-in task)
#   2. corpus:     kforge corpus build                   (the project's kernel writer: several
#                  variants per supported task; prompts rendered as the run renders them, with the
#                  GPU facts probed from --gpu as the run's task generator probes them) over the
#                  synthesized tasks and, with --builtin-split (default on), every other built-in
#                  task the writer supports (odd lines of its list); the even ones are held out
#   3. tokenizer:  kforge tokenizer train                (byte-level BPE on the corpus)
#   4. pretrain:   kforge pretrain                       (SFT of a small Qwen2-shaped model)
#   5. held out:   --heldout of the held-out built-ins (all of the supported built-ins without the
#                  split), G samples each (kforge sample), verdicts (kforge eval).
# The first attempt trained on synthesized tasks only (98 % multi-op chains) and wrote no correct
# kernel for the built-ins, mostly single ops (bench/RESULTS.md): the split puts single ops of the
# same families in the corpus while keeping the held-out tasks out of it.
#
# Usage: deploy/make_tiny.sh --kforge BIN --work DIR --model DIR [--gpu N] [--synth N]
#          [--vocab N] [--heldout N] [--samples G] [--max-new-tokens N] [--no-builtin-split] [--steps step1,step2,...] [-- PRETRAIN ARGS...]
# --steps picks steps by name (synth,corpus,tokenizer,pretrain,heldout; default all); later steps
# read what earlier ones wrote under --work.
set -euo pipefail
kforge= work= model= gpu=0 synth=1500 vocab=8192 heldout=24 samples=8 max_new=3072 split=1 steps=synth,corpus,tokenizer,pretrain,heldout
while [[ $# -gt 0 ]]; do
  case $1 in
    --kforge) kforge=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --gpu) gpu=$2; shift 2 ;;
    --synth) synth=$2; shift 2 ;;
    --vocab) vocab=$2; shift 2 ;;
    --heldout) heldout=$2; shift 2 ;;
    --samples) samples=$2; shift 2 ;;
    --max-new-tokens) max_new=$2; shift 2 ;;
    --no-builtin-split) split=0; shift ;;
    --steps) steps=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "make_tiny: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -n $kforge && -n $work && -n $model ]] || { echo "make_tiny: --kforge, --work and --model are required" >&2; exit 2; }
pretrain_args=("$@")
[[ ${#pretrain_args[@]} -gt 0 ]] || pretrain_args=(--hidden 320 --layers 6 --heads 5 --kv-heads 1
  --intermediate 864 --max-len 8192 --max-positions 8192 --batch-tokens 65536 --epochs 8 --lr 2e-3
  --warmup 0.05 --val-fraction 0.03 --log-every 10 --eval-every 50 --seed 1)
want() { [[ ,$steps, == *,$1,* ]]; }
gpu_args=(); [[ $gpu -ge 0 ]] && gpu_args=(--gpu "$gpu")
mkdir -p "$work"
t() { local t0=$SECONDS; "$@"; echo "make_tiny: $(basename "$1") ${2:-} took $((SECONDS - t0)) s" >&2; }

if want synth; then
  t "$kforge" tasks synth --count "$synth" --seed 1 --exclude builtin --out "$work/synth.jsonl" \
    --max-ops 3 --max-seconds 150 >"$work/synth.log" 2>&1 || { tail -20 "$work/synth.log"; exit 1; }
  tail -25 "$work/synth.log"
fi
if want corpus; then
  rm -rf "$work/corpus" "$work/corpus-builtin" "$work/builtin"
  t "$kforge" corpus build --tasks "$work/synth.jsonl" --out "$work/corpus" "${gpu_args[@]}"
  # The supported built-ins, split by line: odd lines train, even lines are held out.
  "$kforge" corpus build --tasks builtin --out "$work/builtin" "${gpu_args[@]}" >/dev/null
  if [[ $split == 1 ]]; then
    awk 'NR % 2 == 1' "$work/builtin/tasks.jsonl" >"$work/builtin_train.jsonl"
    awk 'NR % 2 == 0' "$work/builtin/tasks.jsonl" >"$work/builtin_heldout.jsonl"
    t "$kforge" corpus build --tasks "$work/builtin_train.jsonl" --out "$work/corpus-builtin" "${gpu_args[@]}"
    cat "$work/corpus/sft.jsonl" "$work/corpus-builtin/sft.jsonl" >"$work/sft.jsonl"
  else
    cp "$work/builtin/tasks.jsonl" "$work/builtin_heldout.jsonl"
    cp "$work/corpus/sft.jsonl" "$work/sft.jsonl"
  fi
  echo "make_tiny: $(grep -c . "$work/sft.jsonl") training records; $(grep -c . "$work/builtin_heldout.jsonl") held-out built-ins"
fi
if want tokenizer; then
  rm -rf "$work/tokenizer"
  t "$kforge" tokenizer train --input "$work/sft.jsonl" --vocab "$vocab" --out "$work/tokenizer"
fi
if want pretrain; then
  rm -rf "$model"
  dev=cpu; [[ $gpu -ge 0 ]] && dev=cuda:$gpu
  t "$kforge" pretrain --data "$work/sft.jsonl" --tokenizer "$work/tokenizer" --out "$model" \
    --device "$dev" "${pretrain_args[@]}"
fi
if want heldout; then
  rm -rf "$work/samples"
  # Every k-th held-out built-in task, so each family is in the sample.
  awk -v n="$heldout" 'NR==FNR{c++; next} (FNR-1) % int((c+n-1)/n) == 0' \
    "$work/builtin_heldout.jsonl" "$work/builtin_heldout.jsonl" >"$work/heldout_tasks.jsonl"
  echo "make_tiny: $(grep -c . "$work/heldout_tasks.jsonl") held-out tasks of $(grep -c . "$work/builtin_heldout.jsonl")"
  t "$kforge" sample --model "$model" --tasks "$work/heldout_tasks.jsonl" --out "$work/samples" \
    --samples "$samples" --max-new-tokens "$max_new" "${gpu_args[@]}"
  eval_args=(); [[ $gpu -lt 0 ]] && eval_args=(--compile-only)
  t "$kforge" eval --tasks "$work/samples/tasks.jsonl" --candidates "$work/samples" \
    --out "$work/verdicts.jsonl" --summary "$work/eval_summary.json" "${eval_args[@]}" | tail -20
fi

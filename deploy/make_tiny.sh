#!/usr/bin/env bash
# How kforge-tiny is made, start to end, and how it is measured on held-out tasks. Each step is a
# kforge command, so the recipe is the record: rerun it with the same arguments for the same corpus
# and (on the same device) the same weights.
#
#   1. split:      the built-in tasks the writer supports (kforge corpus build --tasks builtin),
#                  split by line: odd lines train, even lines are held out (--no-builtin-split: all
#                  held out, none trained on)
#   2. synth:      kforge tasks synth --device cpu --exclude <held-out built-ins>: chains of 1-3
#                  ops, kept by the CPU filters (they run, are deterministic, not degenerate); none
#                  shares a signature, reference or op skeleton with a held-out task. The CPU is
#                  fast here (~40 tasks/s) and the GPU's eager-time window only matters for a
#                  run's task pool, not for a kernel corpus
#   2b. rlpool:    tasks for RL that neither the corpus nor the held-out split holds: kforge tasks
#                  synth with another seed (--rl-seed), up to 3 ops as the corpus's, excluding every
#                  built-in and every corpus task (signature, reference or op skeleton); of those,
#                  the first --rl-pool that the corpus writer supports (kforge corpus build says
#                  which), the families the model learnt. Written to WORK/rl_tasks.jsonl
#   3. corpus:     kforge corpus build                   (the project's kernel writer: several
#                  variants per supported task; prompts rendered as the run renders them, with the
#                  GPU facts probed from --gpu as the run's task generator probes them) over the
#                  synthesized tasks and the training built-ins
#   4. tokenizer:  kforge tokenizer train                (byte-level BPE on the corpus)
#   5. pretrain:   kforge pretrain                       (SFT of a small Qwen2-shaped model)
#   6. heldout:    --heldout of the held-out built-ins, G samples each (kforge sample), verdicts
#                  (kforge eval).
# History (bench/RESULTS.md): the first attempt trained on GPU-filtered synthesized tasks only,
# excluding every built-in (98 % multi-op chains), and wrote no correct kernel for the built-ins;
# the second added the odd built-ins and still wrote none: the samples recalled training tasks by
# the id in the kernel's first line. The writer now leaves ids out and restates the reference
# first, and the corpus is several times larger (CPU synthesis, only held-out tasks excluded):
# 3 / 160 correct. Those models learnt every token but the copied op names (teacher-forced, a
# training record's first miss is the op in the restated reference), so the loss now weighs the
# first completion tokens 10x (--lead-tokens 48 --lead-weight 10). v4 (2026-11-30): that raised
# exact restatements of the held-out references from 6 to 21 of 160 (3 of 20 tasks; its verdicts were not
# measured: the eval ran out of time), and showed a format gap: the samples wrote
# `return torch.leaky_relu(x, 0.01); return y`, the synthesized tasks' "y = ...; return y" habit.
# Synthesis now writes both forms; with that and --lead-tokens 64: 11 of 160 restated, 0 of 160
# correct. deploy/tiny_restatement.py SAMPLES_DIR counts restatements per task (and, with
# --writer/--verdicts as the heldout step runs it, kf_op against the writer's and the verdicts). v6 (2026-12-02): the
# corpus adds 40,000 copy drills (corpus/copy_drill.hpp: the task section with op names and
# numbers scrambled, completion = the restatement alone) so the restatement can only be learnt by
# copying, and kernels write constants as the reference does ("0.01f", not "0.00999999978f"):
# exact restatements 34 of 152 (6 of 19 tasks), but 124 compile errors and 0 correct (v6). The
# samples restated the op and then wrote another chain in each float4 lane, so maps now write the
# ops once (a kf_op device function every variant calls) and the formulas follow the restatement:
# compile errors fell to 72 (52 at temperature 0.2), still 0 correct, kf_op holding the model's
# usual relu/softplus chain whatever the task (v7). v8 (2026-12-02): the comment above kf_op that
# restates the reference and its formulas, and the focus weighting of kf_op (--focus-from/
# --focus-to, 10x, in the defaults below): 3 of 152 correct (v8, these defaults). v8 continued for
# 2,600 steps (--init, lr 1e-3) on a corpus with consecutive value names and the inputs named above
# the count check: 20 of 152 correct, 71 of 456 on all 57 held-out tasks (v9). v10 (2026-12-02):
# v9 + 2,600 steps on row-program output comments and three reduction spellings: 35 of 152, 80 of 456, and
# reductions pass (v10, models/kforge-tiny).
#
# Usage: deploy/make_tiny.sh --kforge BIN --work DIR --model DIR [--gpu N] [--synth N]
#          [--inputs DIR] [--copy-drills N] [--lowering-drills N] [--repair-drills N] [--vocab N] [--heldout N] [--samples G] [--max-new-tokens N] [--no-builtin-split]
#          [--rl-pool N] [--rl-seed S] [--steps step1,step2,...] [-- PRETRAIN ARGS...]
# --inputs DIR: the split's and synth's outputs made elsewhere (builtin_train.jsonl,
# builtin_heldout.jsonl, synth.jsonl or synth.jsonl.gz), copied into --work first: synthesis runs
# on a CPU host and a device call starts at the corpus (the GPU's facts go into the prompts).
# --steps picks steps by name (split,synth,rlpool,corpus,tokenizer,pretrain,heldout; default all); later
# steps read what earlier ones wrote under --work. A recipe longer than one device call goes on in
# the next from the last model: --steps corpus,pretrain,heldout -- --init OLD_MODEL --steps N ...
# (the training flags without the shape flags, which --init takes from OLD_MODEL, and OLD_MODEL's
# tokenizer). models/kforge-tiny/README.md trained that way, over two calls.
# --repair-drills N (default 0; v15 was continued with 3,986 made apart, models/kforge-tiny/README.md):
# two-turn records, a corpus kernel broken by one edit, the sandbox's observation of it, the kernel
# (corpus/repair_drill.hpp), so that a model learns to answer an episode's observation; pretrain
# trains on their second turn. With --gpu N the drills are judged on that GPU, so they include
# breakages only a run shows (wrong answers, faults); with --gpu -1 only those that stop the build.
set -euo pipefail
inputs= kforge= work= model= gpu=0 synth=10000 drills=40000 lowering=60000 repair=0 vocab=8192 heldout=24 samples=8 max_new=3072 split=1 rl_pool=96 rl_seed=21
steps=split,synth,rlpool,corpus,tokenizer,pretrain,heldout
while [[ $# -gt 0 ]]; do
  case $1 in
    --kforge) kforge=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --gpu) gpu=$2; shift 2 ;;
    --synth) synth=$2; shift 2 ;;
    --copy-drills) drills=$2; shift 2 ;;
    --lowering-drills) lowering=$2; shift 2 ;;
    --repair-drills) repair=$2; shift 2 ;;
    --inputs) inputs=$2; shift 2 ;;
    --vocab) vocab=$2; shift 2 ;;
    --heldout) heldout=$2; shift 2 ;;
    --samples) samples=$2; shift 2 ;;
    --max-new-tokens) max_new=$2; shift 2 ;;
    --no-builtin-split) split=0; shift ;;
    --rl-pool) rl_pool=$2; shift 2 ;;
    --rl-seed) rl_seed=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "make_tiny: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -n $kforge && -n $work && -n $model ]] || { echo "make_tiny: --kforge, --work and --model are required" >&2; exit 2; }
pretrain_args=("$@")
# 2400 steps: ~2.4 epochs of the 62 M-token corpus in ~250 s on an H200, so that corpus, pretraining
# and the held-out verdicts fit one 10-minute device call with the build. --max-completion-tokens
# 3072, the sampler's max_new_tokens: no kernel the model could not finish there is learnt
# (v8 to v14 were trained without it).
[[ ${#pretrain_args[@]} -gt 0 ]] || pretrain_args=(--hidden 320 --layers 6 --heads 5 --kv-heads 1
  --intermediate 864 --max-len 8192 --max-positions 8192 --max-completion-tokens 3072
  --batch-tokens 65536 --steps 2400 --lr 2e-3 --lead-tokens 48 --lead-weight 10
  --focus-from "// One element of the reference" --focus-to $'\n}\n' --focus-weight 10
  --warmup 0.05 --val-fraction 0.03 --log-every 10 --eval-every 50 --seed 1)
want() { [[ ,$steps, == *,$1,* ]]; }
gpu_args=(); [[ $gpu -ge 0 ]] && gpu_args=(--gpu "$gpu")
mkdir -p "$work"
if [[ -n $inputs ]]; then
  for f in builtin_train.jsonl builtin_heldout.jsonl; do
    cp "$inputs/$f" "$work/$f" || { echo "make_tiny: --inputs $inputs has no $f" >&2; exit 2; }
  done
  if [[ -f $inputs/synth.jsonl.gz ]]; then gunzip -c "$inputs/synth.jsonl.gz" >"$work/synth.jsonl"
  else cp "$inputs/synth.jsonl" "$work/synth.jsonl" || { echo "make_tiny: --inputs $inputs has no synth.jsonl(.gz)" >&2; exit 2; }; fi
fi
t() { local t0=$SECONDS; "$@"; echo "make_tiny: $(basename "$1") ${2:-} took $((SECONDS - t0)) s" >&2; }

if want split; then
  rm -rf "$work/builtin"
  "$kforge" corpus build --tasks builtin --out "$work/builtin" >/dev/null
  if [[ $split == 1 ]]; then
    awk 'NR % 2 == 1' "$work/builtin/tasks.jsonl" >"$work/builtin_train.jsonl"
    awk 'NR % 2 == 0' "$work/builtin/tasks.jsonl" >"$work/builtin_heldout.jsonl"
  else
    : >"$work/builtin_train.jsonl"
    cp "$work/builtin/tasks.jsonl" "$work/builtin_heldout.jsonl"
  fi
  echo "make_tiny: $(grep -c . "$work/builtin_train.jsonl") built-ins to train on, $(grep -c . "$work/builtin_heldout.jsonl") held out"
fi
if want synth; then
  t "$kforge" tasks synth --device cpu --count "$synth" --seed 1 --max-ops 3 \
    --exclude "$work/builtin_heldout.jsonl" --out "$work/synth.jsonl" --max-seconds 600 \
    >"$work/synth.log" 2>&1 || { tail -20 "$work/synth.log"; exit 1; }
  tail -22 "$work/synth.log"
fi
if want rlpool; then
  [[ -f $work/synth.jsonl ]] || { echo "make_tiny: rlpool needs the synth step's $work/synth.jsonl (the corpus tasks it excludes)" >&2; exit 2; }
  # 3 synthesized tasks per pool task: the writer supports about 60 % of them (345 of 600,
  # measured 2026-12-03). Up to 100 tries per pool task: about half are dropped as corpus or
  # built-in look-alikes (600 kept of 2,367 tried, 2026-12-03). Keep --rl-seed apart from the
  # corpus's seed (1): with it, the first draws repeat the corpus's --synth tasks and are all dropped, and with the default
  # 10,000 of them the tries run out (the step then stops, naming the shortfall).
  t "$kforge" tasks synth --device cpu --count $((rl_pool * 3)) --seed "$rl_seed" --max-ops 3 \
    --exclude builtin "$work/synth.jsonl" --out "$work/rl_synth.jsonl" --max-tries $((rl_pool * 100)) \
    >"$work/rl_synth.log" 2>&1 || { tail -20 "$work/rl_synth.log"; exit 1; }
  rm -rf "$work/rl_writer"
  "$kforge" corpus build --tasks "$work/rl_synth.jsonl" --out "$work/rl_writer" >"$work/rl_writer.log"
  head -n "$rl_pool" "$work/rl_writer/tasks.jsonl" >"$work/rl_tasks.jsonl"
  n=$(grep -c . "$work/rl_tasks.jsonl" || true)
  [[ $n -eq $rl_pool ]] || { echo "make_tiny: rlpool found $n tasks the writer supports, not $rl_pool (see $work/rl_writer.log)" >&2; exit 1; }
  echo "make_tiny: $n synthesized RL tasks (seed $rl_seed) in $work/rl_tasks.jsonl"
fi
if want corpus; then
  rm -rf "$work/corpus" "$work/corpus-builtin"
  cat "$work/synth.jsonl" "$work/builtin_train.jsonl" >"$work/train_tasks.jsonl"
  t "$kforge" corpus build --tasks "$work/train_tasks.jsonl" --out "$work/corpus" "${gpu_args[@]}" \
    --copy-drills "$drills" --lowering-drills "$lowering" --repair-drills "$repair" \
    --exclude "$work/builtin_heldout.jsonl"
  cp "$work/corpus/sft.jsonl" "$work/sft.jsonl"
  echo "make_tiny: $(grep -c . "$work/sft.jsonl") training records; $(grep -c . "$work/builtin_heldout.jsonl") held-out built-ins"
fi
if want tokenizer; then
  rm -rf "$work/tokenizer"
  # On the kernel records only: the drills' made-up names and numbers would take merges that no
  # real prompt uses (8192 ids with them, ~2,600 without, measured 2026-12-02).
  # Repair drills repeat kernel records with an edit, and hold "turns", which the tokenizer's
  # trainer does not read.
  grep -v '"variant":"copy_drill"\|"variant":"lowering_drill"\|"drill":"repair"' "$work/sft.jsonl" \
    >"$work/tokenizer_input.jsonl" || true
  t "$kforge" tokenizer train --input "$work/tokenizer_input.jsonl" --vocab "$vocab" --out "$work/tokenizer"
fi
if want pretrain; then
  dev=cpu; [[ $gpu -ge 0 ]] && dev=cuda:$gpu
  # Going on from a model (--init OLD) without a tokenizer step: OLD's tokenizer, the one its
  # embeddings were trained with (a tokenizer retrained on a changed corpus would differ).
  tok=$work/tokenizer
  for ((i = 0; i + 1 < ${#pretrain_args[@]}; ++i)); do
    [[ ${pretrain_args[i]} == --init ]] || continue
    if [[ $(realpath -m "${pretrain_args[i + 1]}") == "$(realpath -m "$model")" ]]; then
      echo "make_tiny: --init ${pretrain_args[i + 1]} is --model: pretraining would delete it first" >&2; exit 2
    fi
    want tokenizer || tok=${pretrain_args[i + 1]}
  done
  rm -rf "$model"
  t "$kforge" pretrain --data "$work/sft.jsonl" --tokenizer "$tok" --out "$model" \
    --device "$dev" "${pretrain_args[@]}"
fi
if want heldout; then
  # Every k-th held-out built-in task, so each family is in the sample.
  awk -v n="$heldout" 'NR==FNR{c++; next} (FNR-1) % int((c+n-1)/n) == 0' \
    "$work/builtin_heldout.jsonl" "$work/builtin_heldout.jsonl" >"$work/heldout_tasks.jsonl"
  echo "make_tiny: $(grep -c . "$work/heldout_tasks.jsonl") held-out tasks of $(grep -c . "$work/builtin_heldout.jsonl")"
  "$(dirname "${BASH_SOURCE[0]}")/heldout_eval.sh" --kforge "$kforge" --model "$model" --out "$work" \
    --tasks "$work/heldout_tasks.jsonl" --gpu "$gpu" --samples "$samples" --max-new-tokens "$max_new"
  # Per task: restatements, kf_op against the writer's own for the task, verdicts.
  rm -rf "$work/heldout_writer"
  "$kforge" corpus build --tasks "$work/heldout_tasks.jsonl" --out "$work/heldout_writer" >/dev/null || true
  python3 "$(dirname "${BASH_SOURCE[0]}")/tiny_restatement.py" --writer "$work/heldout_writer" \
    --verdicts "$work/verdicts.jsonl" "$work/samples" || true
fi

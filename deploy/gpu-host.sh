#!/usr/bin/env bash
# On the GPU host (see ../shared/DEVICE.md; Ubuntu 24.04, PyTorch's CUDA LibTorch, no Debian
# packages): configures and builds kforge against the carried .gpu-deps, runs every test (the GPU
# ones included) and the benchmarks, writes full logs to $OUT (or ./gpu-out) and prints a short
# summary table last.
#
# Here, first:  cmake -S . -B build -G Ninja && cmake --build build &&
#               deploy/pack-deps.sh build .gpu-deps
# Then run this script there with .gpu-deps carried along. Learned on the device: its copy of the
# repository carries an old .git (never `git checkout` there: it rewinds the sources), and only a
# handful of files come back from $OUT — point OUT elsewhere and copy back the logs you need.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
deps=${KFORGE_DEPS:-$root/.gpu-deps}
out=${OUT:-$root/gpu-out}
build=${KFORGE_GPU_BUILD:-$root/build-gpu}
mkdir -p "$out"
declare -a rows=()
# KFORGE_STEPS (a comma list of: tests (all), gputests (the gpu label only), run, loop, baseline,
# synth, bench; default all; loopmodes, loopnccl, loopranks, sandboxwall, sandboxcost, sandboxanchor,
# demobefore, demorun, demoafter, episodesbefore, episodesafter, peft, lora7b and looplora only
# when named) and
# KFORGE_BENCHES (bench program names; default all) pick what runs, so one device call fits its
# time limit. The build always runs: every target, or the KFORGE_TARGETS list (space-separated).
# tiny (only when named): deploy/make_tiny.sh with KFORGE_TINY_ARGS (its --steps and sizes; e.g.
# "--inputs .tiny-in --steps corpus,tokenizer,pretrain,heldout" with .tiny-in carried) on GPU 0,
# work in $build/tiny, the model in $build/tiny-model. Back in $out: tiny.log, tiny_results.tgz (eval
# summary, verdicts, samples, the model's small files) and tiny_model.safetensors.part-* (15 MiB
# pieces, under a device call's 16 MiB a file: cat them back together). With test_corpus_gpu built
# (KFORGE_TARGETS="kforge test_corpus_gpu") it runs first and a failure stops make_tiny.
want() { [[ -z ${KFORGE_STEPS:-} || ,${KFORGE_STEPS}, == *,$1,* ]]; }
# Steps outside the default "all" (they take long): run only when KFORGE_STEPS names them.
asked() { [[ ,${KFORGE_STEPS:-}, == *,$1,* ]]; }
row() { rows+=("$(printf '%-34s %-6s %s' "$1" "$2" "$3")"); }
step() {  # step NAME LOGFILE CMD...: runs CMD, logs it, records pass/fail and its duration
  local name=$1 log=$2; shift 2
  local t0=$SECONDS
  "$@" >"$out/$log" 2>&1
  local rc=$?
  row "$name" "$([[ $rc == 0 ]] && echo ok || echo FAIL)" "$((SECONDS - t0)) s, log $log"
  return $rc
}

# The loops' random policy (deploy/make_random_model.py), made once per build directory:
# random_model [DIR [MAKE_RANDOM_MODEL_ARGS...]], by default $build/random-qwen of Qwen2.5-0.5B's shapes.
random_model() {
  local dir=${1:-$build/random-qwen}
  (($# > 0)) && shift
  [[ -f $dir/config.json ]] ||
    step "random model $(basename "$dir")" "model-$(basename "$dir").log" python3 "$root/deploy/make_random_model.py" \
      --out "$dir" --tokenizer "$root/tests/model/fixtures/tokenizer" "$@"
}

# loop_run MANIFEST RUN_DIR LABEL LOG [MODEL_DIR]: `kforge run` of deploy/manifests/MANIFEST.toml
# with MODEL_DIR (by default the loops' random policy), in a fresh $build/RUN_DIR.
loop_run() {
  local manifest=$1 run_dir=$build/$2 model=${5:-$build/random-qwen}
  [[ -n ${5:-} ]] || random_model
  sed "s|@MODEL@|$model|" "$root/deploy/manifests/$manifest.toml" >"$build/$manifest.toml"
  rm -rf "$run_dir"
  step "$3" "$4" "$build/kforge" run --manifest "$build/$manifest.toml" --run-dir "$run_dir" --no-progress
}

# A device call carries 64 MiB in all; .gpu-deps is ~15 MB as a folder, ~3.5 MB as
# .gpu-deps.tar.xz (`tar cJf .gpu-deps.tar.xz .gpu-deps` here), which leaves room for a checkpoint.
# Unpacked when the folder is missing or older than the archive (deploy/lib/configure.sh, shared
# with deploy/setup.sh).
. "$root/deploy/lib/configure.sh"
kforge_unpack_deps "$deps" gpu-host || exit 2
[[ -d $deps ]] || { echo "gpu-host: $deps missing: make it with deploy/pack-deps.sh" >&2; exit 2; }
kforge_deps_env "$deps"
torch_prefix=$(python3 -c "import torch; print(torch.utils.cmake_prefix_path)")
mapfile -t cuda_args < <(kforge_cuda_configure_args "$deps" "$torch_prefix" 90a /usr/local/cuda/bin/nvcc)
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader >"$out/gpus.txt" 2>&1
gpus=$(grep -c . "$out/gpus.txt")

build_all() {
  step configure configure.log cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    "${cuda_args[@]}" ${KFORGE_CMAKE_ARGS:-} \
    && step build build.log cmake --build "$build" -j "$(nproc)" ${KFORGE_TARGETS:+--target $KFORGE_TARGETS} -- -k 0
}
# KFORGE_REUSE_BUILD=1: a later call on the same warm machine uses the build already there when it
# was built from the same sources with the same KFORGE_CMAKE_ARGS and KFORGE_TARGETS (each call
# copies the sources afresh, so ninja may see them as new and rebuild everything, ~80 s). The stamp:
# a hash of those and of every file the build reads (sources, schemas, embedded tasks and tables).
source_stamp() {
  {
    echo "${KFORGE_CMAKE_ARGS:-}|${KFORGE_TARGETS:-}"
    (cd "$root" && find . \( -path './build*' -o -path './.git' -o -path './.gpu-deps' -o -path './models' \
      -o -path './bench' -o -path './gpu-out' \) -prune -o -type f \( -name '*.cpp' -o -name '*.hpp' \
      -o -name '*.h' -o -name '*.cu' -o -name '*.fbs' -o -name '*.toml' -o -name '*.txt' \
      -o -name '*.cmake' -o -name '*.jsonl' -o -name '*.inc' -o -name '*.in' \) -print0 |
      LC_ALL=C sort -z | xargs -0 -r sha256sum)
  } | sha256sum | cut -c1-16
}
stamp=$(source_stamp)
if [[ -n ${KFORGE_REUSE_BUILD:-} && -x $build/kforge && $(cat "$build/.source-stamp" 2>/dev/null) == "$stamp" ]]; then
  row build reused "$build (sources $stamp)"; built=0
else
  rm -f "$build/.source-stamp"
  build_all; built=$?
  [[ $built == 0 ]] && echo "$stamp" >"$build/.source-stamp"
fi
[[ $built == 0 ]] && {
    # The GPU task test writes every built-in reference's eager time here (kforge tasks baseline's seed).
    export KFORGE_TASKS_TIMES=$out/eager_times.jsonl
    if want tests; then
      step "tests (cpu)" ctest.log ctest --test-dir "$build" --output-on-failure -j 4 -LE gpu
    fi
    if want tests || want gputests; then
      step "tests (gpu label, verbose)" ctest-gpu.log ctest --test-dir "$build" -L gpu -V
    fi
    if want run; then
      # The README's main job: the embedded default (RL of models/kforge-tiny, a 13-minute limit),
      # cut to 4 here so the step fits a device call with the build. From the repository root:
      # the default's model and task paths are relative to it.
      step "main job: kforge run --time-limit 240" run.log bash -c "cd '$root' && '$build/kforge' run \
        --time-limit 240 --no-progress --run-dir '$build/run'"
      cp "$build/run/summary.json" "$out/run_summary.json" 2>/dev/null
      cp "$build/run/train.jsonl" "$out/run_train.jsonl" 2>/dev/null
    fi
    # The demonstration (RL of the shipped model, measured on held-out tasks before and after), over
    # several device calls (10 minutes each) on one machine kept warm
    # (it is given back after 30 idle seconds or 30 minutes held, and $build/demo with it):
    #   1. demobefore (with the build): the shipped model on the 57 held-out tasks, G = 8;
    #   2. demorun: the embedded default for KFORGE_DEMO_SECONDS (default 450, the default's own
    #      time_limit_s: one call, 546 s with a fresh build, measured 2026-12-03; the longest
    #      drain, final checkpoint and shutdown the head allows (85 s) could take it past 600 s);
    #   3. (a longer run) demorun again: resumes the run from its newest complete checkpoint for as
    #      long again;
    #   4. demoafter: that checkpoint measured the same way, then kforge compare (paired bootstrap
    #      over tasks) and the run's report.
    # KFORGE_DEMO_DIR (default $build/demo) and KFORGE_DEMO_MANIFEST (default: the embedded one; a
    # variant made from `kforge manifest --print-default`, e.g. with [buffer] dedup = "group", for an
    # A/B against the recorded demonstration; a relative path is read from the repository root; a
    # resumed leg uses the run's own snapshot). KFORGE_DEMO_BEFORE: a recorded before measure of
    # the shipped model (verdict lines, .jsonl or .jsonl.gz, relative to the root), used when
    # demobefore did not run on this machine: it saves that step's device time (v14's:
    # bench/data/2026-12-03-tiny-v14-default-run-355s/v14_heldout_verdicts.jsonl.gz, the same measure and eval seed).
    # KFORGE_DEMO_TURNS=N (N > 1): RL on episodes instead, the default with [agent] max_turns = N,
    # the observations' feedback that deploy/episodes_eval.sh measures (no profiles), and activation
    # checkpointing (the memory plan refuses 3-turn episodes without it on an 80 GiB GPU), and
    # KFORGE_DEMO_EPISODE_REWARD as [agent] reward where set (e.g. turn_returns), and with
    # KFORGE_DEMO_TURNS_APART=1 [sampler] batch_turns_with_groups = false (turns and new groups in
    # separate calls, as before 2026-12-07, for a measure of one change at a time); measured
    # by episodesbefore / episodesafter: deploy/episodes_eval.sh (3 episodes of up to N turns
    # against 3 x N single-shot samples) on the shipped model and on the run's newest checkpoint,
    # then kforge compare of the two models' episodes per task and a chart of both against the
    # budget ($out/episodes_chart.svg). KFORGE_EPISODES_BEFORE: a recorded episodesbefore measure
    # (its episodes' verdict lines) for that compare, as KFORGE_DEMO_BEFORE is for demoafter's.
    demo=${KFORGE_DEMO_DIR:-$build/demo}
    demo_manifest=()
    [[ -n ${KFORGE_DEMO_MANIFEST:-} ]] && demo_manifest=(--manifest "$KFORGE_DEMO_MANIFEST")
    turns=${KFORGE_DEMO_TURNS:-1}
    if ((turns > 1)); then
      if [[ -n ${KFORGE_DEMO_MANIFEST:-} ]]; then
        echo "gpu-host: KFORGE_DEMO_TURNS makes the demonstration's manifest; unset KFORGE_DEMO_MANIFEST" >&2
        exit 2
      fi
      "$build/kforge" manifest --print-default |
        sed 's/^activation_checkpointing = false/activation_checkpointing = true/' >"$build/episodes.toml"
      grep -q '^activation_checkpointing = true' "$build/episodes.toml" ||
        { echo "gpu-host: the default manifest has no activation_checkpointing line to turn on" >&2; exit 2; }
      printf '\n[agent]\nmax_turns = %d\nfeedback = ["compile", "resources", "correctness", "runtime", "timing"]\n' \
        "$turns" >>"$build/episodes.toml"
      [[ -n ${KFORGE_DEMO_EPISODE_REWARD:-} ]] &&
        printf 'reward = "%s"\n' "$KFORGE_DEMO_EPISODE_REWARD" >>"$build/episodes.toml"
      if [[ ${KFORGE_DEMO_TURNS_APART:-0} == 1 ]]; then
        sed -i 's/^batch_turns_with_groups = true/batch_turns_with_groups = false/' "$build/episodes.toml"
        grep -q '^batch_turns_with_groups = false' "$build/episodes.toml" ||
          { echo "gpu-host: the default manifest has no batch_turns_with_groups line to turn off" >&2; exit 2; }
      fi
      demo_manifest=(--manifest "$build/episodes.toml")
    fi
    episodes_eval() {  # episodes_eval MODEL before|after: into $demo/episodes-WHEN, its results back in $out
      rm -rf "$demo/episodes-$2"
      "$root/deploy/episodes_eval.sh" --kforge "$build/kforge" --model "$1" --out "$demo/episodes-$2" --turns "$turns"
      local rc=$?
      cp "$demo/episodes-$2/compare-best.txt" "$out/episodes_$2_compare_best.txt" 2>/dev/null
      cp "$demo/episodes-$2/episodes/verdicts.jsonl" "$out/episodes_$2_verdicts.jsonl" 2>/dev/null
      cp "$demo/episodes-$2/single-shot/verdicts.jsonl" "$out/episodes_$2_single_shot_verdicts.jsonl" 2>/dev/null
      return $rc
    }
    # The newest complete checkpoint of the demonstration's run (what kforge run --resume loads).
    demo_checkpoint() {
      local best= n=-1 d k
      for d in "$demo"/run/checkpoints/step-*; do
        k=${d##*/step-}
        [[ $k =~ ^[0-9]+$ && -f $d/model.safetensors && -f $d/optimizer.pt && -f $d/trainer_state.json ]] || continue
        ((k > n)) && { n=$k; best=$d; }
      done
      echo "$best"
    }
    # recorded_before FILE DEST: a recorded before measure (verdict lines, .jsonl or .jsonl.gz, relative
    # to the root) as DEST, when the step that makes DEST did not run on this machine.
    recorded_before() {
      [[ -z $1 || -s $2 ]] && return 0
      mkdir -p "$(dirname "$2")"
      case $1 in
        *.gz) gunzip -c "$root/$1" >"$2" ;;
        *) cp "$root/$1" "$2" ;;
      esac
    }
    demo_run() ( cd "$root" && exec "$build/kforge" run "$@" --no-progress )  # the default's paths are relative
    if asked demobefore; then
      step "demo: held-out before (kforge-tiny)" demo-before.log "$root/deploy/heldout_eval.sh" \
        --kforge "$build/kforge" --model "$root/models/kforge-tiny" --out "$demo/before"
      cp "$demo/before/verdicts.jsonl" "$out/demo_before_verdicts.jsonl" 2>/dev/null
    fi
    if asked demorun; then
      secs=${KFORGE_DEMO_SECONDS:-450}
      if [[ -n $(demo_checkpoint) ]]; then
        step "demo: kforge run --resume (${secs} s more)" demo-run.log demo_run --resume "$demo/run" --time-limit "$secs"
      else
        rm -rf "$demo/run"  # an earlier leg that left no complete checkpoint: start afresh
        step "demo: kforge run (${secs} s)" demo-run.log demo_run "${demo_manifest[@]}" --run-dir "$demo/run" \
          --time-limit "$secs"
      fi
      for f in summary.json train.jsonl; do cp "$demo/run/$f" "$out/demo_run_$f" 2>/dev/null; done
    fi
    if asked demoafter; then
      last=$(demo_checkpoint)
      rm -rf "$demo/after"
      recorded_before "${KFORGE_DEMO_BEFORE:-}" "$demo/before/verdicts.jsonl"
      if [[ -z $last ]]; then
        row "demo: held-out after" FAIL "no complete checkpoint under $demo/run/checkpoints"
      else
        step "demo: held-out after (${last##*/})" demo-after.log "$root/deploy/heldout_eval.sh" \
          --kforge "$build/kforge" --model "$last" --out "$demo/after" &&
          step "demo: kforge compare" demo-compare.log "$build/kforge" compare \
            "$demo/before/verdicts.jsonl" "$demo/after/verdicts.jsonl" --json "$out/demo_compare.json"
        cp "$demo/after/verdicts.jsonl" "$out/demo_after_verdicts.jsonl" 2>/dev/null
      fi
      "$build/kforge" report "$demo/run" --out "$out/demo_report.html" >/dev/null 2>&1
    fi
    if asked episodesbefore; then
      step "episodes: before (kforge-tiny)" episodes-before.log episodes_eval "$root/models/kforge-tiny" before
    fi
    if asked episodesafter; then
      last=$(demo_checkpoint)
      if [[ -z $last ]]; then
        row "episodes: after" FAIL "no complete checkpoint under $demo/run/checkpoints"
      else
        recorded_before "${KFORGE_EPISODES_BEFORE:-}" "$demo/episodes-before/episodes/verdicts.jsonl"
        step "episodes: after (${last##*/})" episodes-after.log episodes_eval "$last" after
        if [[ -s $demo/episodes-before/episodes/verdicts.jsonl ]]; then
          step "episodes: kforge compare" episodes-compare.log "$build/kforge" compare \
            "$demo/episodes-before/episodes/verdicts.jsonl" "$demo/episodes-after/episodes/verdicts.jsonl" --best-of-task
          # Before and after in one chart: both models' episodes, and the single-shot samples of
          # each measure made on this machine.
          chart=()
          for w in before after; do
            chart+=(--episodes "$w=$demo/episodes-$w/episodes/verdicts.jsonl")
            [[ -s $demo/episodes-$w/single-shot/verdicts.jsonl ]] &&
              chart+=(--single-shot "$w=$demo/episodes-$w/single-shot/verdicts.jsonl")
          done
          step "episodes: chart" episodes-chart.log python3 "$root/bench/episodes_chart.py" \
            --out "$out/episodes_chart.svg" "${chart[@]}"
        else
          row "episodes: kforge compare" FAIL "no before measure on this machine (run episodesbefore first)"
        fi
      fi
    fi
    if want loop; then
      # The whole loop on this host's GPU(s) with a random 0.5B-shaped Qwen2 and the fixture
      # tokenizer: real sampler, sandbox verdicts, GRPO steps and weight publishing.
      loop_run gpu_loop loop-run "loop: kforge run, random 0.5B on GPU" loop.log
      for f in summary.json train.jsonl report.html; do
        cp "$build/loop-run/$f" "$out/loop_$f" 2>/dev/null
      done
    fi
    if asked loopnccl && [[ $gpus -ge 2 ]]; then
      # Weights by NCCL broadcast from the trainer's process (GPU 1) to a sampler process
      # (GPU 0). Passes when every step published by NCCL and the last step's samples carry the
      # version before it (sync mode: step s samples with version s).
      loop_run gpu_loop_nccl loop-nccl "loop: weights by NCCL, 2 processes" loop-nccl.log
      step "loop: NCCL versions reached the sampler" loop-nccl-check.log "$root/deploy/check_loop_versions.sh" \
        "$build/kforge" "$build/loop-nccl" 4
      cp "$build/loop-nccl/train.jsonl" "$out/loop_nccl_train.jsonl" 2>/dev/null
    fi
    if asked looplora; then
      # The loop with LoRA on a random Qwen2 of Qwen2.5-1.5B's shapes (the fixture tokenizer's
      # vocabulary), on this host's GPU(s): adapters of rank 64 trained with checkpointing, each
      # version's adapters published alone and applied unmerged by the engine sampler.
      random_model "$build/random-qwen-1.5b" --like "$root/deploy/shapes/qwen2.5-1.5b/config.json"
      loop_run gpu_loop_lora loop-lora "loop: LoRA, random 1.5B-shaped on GPU" looplora.log "$build/random-qwen-1.5b"
      step "loop: adapter versions reached the sampler" looplora-check.log "$root/deploy/check_loop_versions.sh" \
        "$build/kforge" "$build/loop-lora" 4 adapters
      for f in summary.json train.jsonl; do cp "$build/loop-lora/$f" "$out/looplora_$f" 2>/dev/null; done
    fi
    if asked loopranks && [[ $gpus -ge 3 ]]; then
      # The trainer's ranks as processes on GPUs 1 and 2 (NCCL, the unique id sent to the
      # rank process), rollout on GPU 0. Passes when the trainer reported its rank process joined and
      # train.jsonl has every step.
      loop_run gpu_loop_ranks loop-ranks "loop: trainer ranks as processes" loop-ranks.log
      step "loop: rank process joined, 4 steps" loop-ranks-check.log bash -c \
        "grep -q 'joined from processes of their own (rank 1: pid .* on cuda:2, summing over NCCL)' '$out/loop-ranks.log' &&
         [[ \$(grep -c . '$build/loop-ranks/train.jsonl') -ge 4 ]]"
    fi
    if asked loopmodes; then
      # The loop's manifest in sync and then async mode, seconds per step and each GPU
      # group's idle fraction (bench/loop_modes.sh). Two more runs of the loop, so not in "all".
      # Async can only gain where rollout and training have GPUs of their own: 2+ GPUs. These
      # settings give rollout and training similar busy times on 2 H200s (2026-11-30: balance
      # 0.76-0.86; bench/RESULTS.md); the bench prints the balance it got.
      # KFORGE_LOOPMODES_ARGS replaces them.
      random_model
      step "loop modes: sync vs async" loopmodes.log "$root/bench/loop_modes.sh" \
        --kforge "$build/kforge" --model "$build/random-qwen" --work "$build/loopmodes" \
        --json "$out/loop_modes.json" \
        ${KFORGE_LOOPMODES_ARGS:---steps 16 --set sampler.max_new_tokens=64 --set buffer.groups_per_batch=8}
      for m in sync async; do cp "$build/loopmodes/$m/summary.json" "$out/loopmodes_${m}_summary.json" 2>/dev/null; done
    fi
    # The corpus writer's kernels are checked on a GPU before a model learns from them, when the
    # build has the test (KFORGE_TARGETS="kforge test_corpus_gpu"): a failing family stops make_tiny
    # (the writer's kernels are not run when the corpus is built, so a change to the writer made on
    # a CPU host is first run here).
    if asked tiny; then
      if [[ -x $build/tests/corpus/test_corpus_gpu ]] &&
        ! step "corpus variants through the sandbox (gate)" corpus-gpu.log "$build/tests/corpus/test_corpus_gpu"; then
        row "make_tiny" FAIL "not run: the writer's kernels failed on the GPU (corpus-gpu.log)"
      else
        step "make_tiny ${KFORGE_TINY_ARGS:-}" tiny.log "$root/deploy/make_tiny.sh" --kforge "$build/kforge" \
          --work "$build/tiny" --model "$build/tiny-model" --gpu 0 ${KFORGE_TINY_ARGS:-}
      fi
      tar czf "$out/tiny_results.tgz" -C "$build" --ignore-failed-read tiny/eval_summary.json tiny/verdicts.jsonl \
        tiny/samples/samples.jsonl tiny/samples/tasks.jsonl \
        $(cd "$build" && ls tiny-model/* 2>/dev/null | grep -v safetensors) 2>/dev/null
      [[ -f $build/tiny-model/model.safetensors ]] &&
        split -b 15m "$build/tiny-model/model.safetensors" "$out/tiny_model.safetensors.part-"
    fi
    if asked corpusgpu; then
      step "corpus variants through the sandbox" corpus-gpu.log "$build/tests/corpus/test_corpus_gpu"
    fi
    # peft (only when named): kforge's LoRA adapters against transformers (+ PEFT where installed)
    # on a random Qwen2 of Qwen2.5-1.5B's shapes, fp32 and bf16 (deploy/check_peft_adapter.sh; the
    # model is kept in $build/peft-check for a later call).
    if asked peft; then
      step "LoRA adapter vs transformers/PEFT" peft.log env KFORGE="$build/kforge" \
        "$root/deploy/check_peft_adapter.sh" "$build/peft-check"
    fi
    # lora7b (only when named): a random Qwen2 of Qwen2.5-Coder-7B's shapes, GRPO steps with LoRA
    # rank 64 and activation checkpointing at 4 x 4,096 tokens a micro-batch, then the engine
    # sampling with the adapter merged and unmerged (bench/RESULTS.md, "A 7B-shaped policy").
    if asked lora7b; then
      step "7B-shaped LoRA GRPO step" lora7b-trainer.log "$build/bench/trainer_bench" --shape qwen2.5-coder-7b \
        --lora-rank 64 --checkpointing --groups 2 --samples 4 --prompt-len 1024 --completion-len 3072 \
        --micro-batch 4 --steps 3 --gpus 1 --json "$out/trainer_bench_7b_lora.json"
      step "7B-shaped engine with a LoRA adapter" lora7b-generate.log "$build/bench/generate_bench" \
        --shape qwen2.5-coder-7b --lora-rank 64 --no-anchor --reps 2 --json "$out/generate_bench_7b_lora.json"
    fi
    if want baseline; then
      step "kforge tasks baseline (GPU eager times)" baseline.log "$build/kforge" tasks baseline \
        --out "$out/baseline.jsonl"
    fi
    if want synth; then
      step "kforge tasks synth --count 1000" synth.log "$build/kforge" tasks synth --count 1000 \
        --seed 1 --out "$out/synth.jsonl" --max-seconds 420
    fi
    # sandboxcost (only when named): sandbox_bench without the confinement, then with it, in one
    # call on one machine (KFORGE_SANDBOX_BENCH_ARGS: more flags for both, e.g. --no-anchor).
    if asked sandboxcost; then
      step "sandbox_bench --no-confine" sandbox_bench_open.log "$build/bench/sandbox_bench" \
        --json "$out/sandbox_bench_open.json" --no-confine ${KFORGE_SANDBOX_BENCH_ARGS:-}
      step "sandbox_bench (confined)" sandbox_bench_confined.log "$build/bench/sandbox_bench" \
        --json "$out/sandbox_bench_confined.json" ${KFORGE_SANDBOX_BENCH_ARGS:-}
    fi
    # sandboxanchor (only when named): sandbox_bench of an older tree against this one, in one
    # call. KFORGE_ANCHOR_TREE: a folder holding the older sources (`git archive COMMIT | tar x -C
    # DIR` here, carried along), built with its own deploy/gpu-host.sh into DIR/build-gpu.
    if asked sandboxanchor && [[ -d ${KFORGE_ANCHOR_TREE:-} ]]; then
      step "anchor tree: build sandbox_bench" anchor_build.log env OUT="$out/anchor" \
        KFORGE_DEPS="$deps" KFORGE_TARGETS=sandbox_bench KFORGE_STEPS=none \
        bash "$KFORGE_ANCHOR_TREE/deploy/gpu-host.sh" &&
        step "sandbox_bench (anchor tree)" sandbox_bench_anchor.log \
          "$KFORGE_ANCHOR_TREE/build-gpu/bench/sandbox_bench" --json "$out/sandbox_bench_anchor.json" \
          ${KFORGE_SANDBOX_BENCH_ARGS:-}
      step "sandbox_bench (this tree)" sandbox_bench_this.log "$build/bench/sandbox_bench" \
        --json "$out/sandbox_bench_this.json" ${KFORGE_SANDBOX_BENCH_ARGS:-}
    fi
    # sandboxwall (only when named): the sandbox's walls on this host — the confinement of a child
    # (test_common), then the candidate suite, the confinement attacks with the static checks off
    # and the reference server's memory (test_sandbox_suite_gpu).
    if asked sandboxwall; then
      step "confinement on this host" confine.log "$build/tests/common/test_common" -tc="*confine*" -s
      step "sandbox suite + confinement attacks" suite-gpu.log "$build/tests/sandbox/test_sandbox_suite_gpu"
    fi
    for b in "$build"/bench/*_bench; do
      [[ -x $b ]] || continue
      name=$(basename "$b")
      want bench && [[ -z ${KFORGE_BENCHES:-} || ,${KFORGE_BENCHES}, == *,$name,* ]] || continue
      # serve_bench measures the CPU unless given a GPU (KFORGE_SERVE_BENCH_ARGS: its flags, e.g.
      # "--gpu 0 --model /models/Qwen2.5-Coder-7B-Instruct").
      extra=()
      [[ $name == serve_bench ]] && read -r -a extra <<<"${KFORGE_SERVE_BENCH_ARGS:---gpu 0}"
      step "bench $name" "$name.log" "$b" --json "$out/$name.json" "${extra[@]}"
    done
  }

echo
echo "== GPU host: $gpus GPU(s): $(head -1 "$out/gpus.txt")"
grep -E "tests passed|tests failed|Skipped|\*\*\*Skipped|Failed" "$out/ctest.log" 2>/dev/null | tail -5
grep -hE "tests passed|tests failed" "$out/ctest-gpu.log" 2>/dev/null
grep -hE "^nccl |SKIP" "$out/ctest-gpu.log" 2>/dev/null | head -5
grep -hE "^(mode|sync|async) |^async/sync" "$out/loopmodes.log" 2>/dev/null
grep -hE "^pretrain: wrote|^restated exactly|^kf_op as the writer|candidates, [0-9]+ correct|^verdicts:" "$out/tiny.log" 2>/dev/null
# A failed build's first errors here too: only a few files come back from a device call, and
# this summary is what its output shows (LibTorch 2 there, 1.13 on the build VM, differ).
grep -m 12 -B1 -A3 "error:" "$out/build.log" 2>/dev/null
printf '%-34s %-6s %s\n' step result detail
printf '%s\n' "${rows[@]}"

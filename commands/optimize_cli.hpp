#pragma once
// The flags of `kforge optimize`, for commands/cli.cpp (header-only: only the kforge executable
// links CLI11).
#include <CLI/CLI.hpp>

#include "commands/optimize_command.hpp"

namespace kforge::pipeline {

inline CLI::App* add_optimize_subcommand(CLI::App& app, optimize_options& o) {
  auto* cmd = app.add_subcommand(
      "optimize", "Work one task in episodes: the model writes a kernel, reads the sandbox's verdict, and writes it again");
  auto* one = cmd->add_option("--task", o.task, "A built-in task id, or a task file");
  cmd->add_option("--task-id", o.task_id, "Which task of --task's file, where it holds several");
  cmd->add_option("--tasks", o.tasks, "Every task of this task file (\"builtin\": the library), each in OUT/<task id>/")
      ->excludes(one);
  cmd->add_option("--model", o.model, "Checkpoint directory (default: models/kforge-tiny)");
  cmd->add_option("--out,-o", o.out, "Output directory")->required();
  cmd->add_option("--turns,-T", o.turns, "Turns per episode, 1-64 (default 3)");
  cmd->add_option("--samples,-G", o.samples, "Episodes, 1-256 (default 4)");
  cmd->add_option("--target-speedup", o.target_speedup, "An episode stops at a correct kernel this fast (default: none)");
  cmd->add_option("--temperature", o.temperature, "Sampling temperature (default 0.8)");
  cmd->add_option("--top-p", o.top_p, "Nucleus mass (default 1)");
  cmd->add_option("--max-new-tokens", o.max_new_tokens, "Tokens per turn, at most (default 1024)");
  cmd->add_option("--max-tokens", o.max_tokens,
                  "An episode ends when its context reaches this many tokens (default: the model's context "
                  "length less --max-new-tokens)");
  cmd->add_option("--batch", o.batch, "Sequences per generate call, 1-4096 (default 64)");
  cmd->add_option("--jobs,-j", o.jobs, "Sandbox threads (default: cores, at most 16)");
  cmd->add_option("--feedback", o.feedback,
                  "What observations show: compile, resources, correctness, runtime, timing, profile (default: all)")
      ->delimiter(',');
  cmd->add_option("--observation-template", o.observation_template, "Observation template file");
  cmd->add_option("--gpu", o.gpu, "CUDA ordinal for the model (default: -1, the CPU)");
  cmd->add_flag("--compile-only", o.compile_only, "The sandbox compiles only, even with GPUs");
  cmd->add_option("--arch", o.arch, "nvcc target (default auto: the sandbox GPU's)");
  cmd->add_option("--seed", o.seed, "Sampling and input-set seed, inputs as kforge eval --seed's (default 1)");
  cmd->add_option("--baselines", o.baselines,
                  "Eager and torch.compile times (kforge tasks baseline --against compile --out): also give each "
                  "correct kernel's speedup against torch.compile, for the tasks measured on this sandbox's GPU model");
  cmd->add_flag("--reuse-repeats", o.reuse_repeats, "Judge a task's repeated kernel once (as kforge eval's flag)");
  cmd->add_option("--ncu", o.ncu,
                  "Nsight Compute for the profiles of correct kernels, taken with --turns > 1 and profile in --feedback "
                  "(default: $KFORGE_NCU, PATH, /usr/local/cuda/bin/ncu; none found: no profiles)");
  return cmd;
}

}  // namespace kforge::pipeline

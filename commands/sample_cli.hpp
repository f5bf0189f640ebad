#pragma once
// The flags of `kforge sample`, for commands/cli.cpp (header-only: only the kforge executable links
// CLI11).
#include <CLI/CLI.hpp>

#include "commands/sample_command.hpp"

namespace kforge::pipeline {

inline CLI::App* add_sample_subcommand(CLI::App& app, sample_options& o) {
  auto* cmd = app.add_subcommand(
      "sample", "Sample G candidate kernels per task from a checkpoint, laid out for `kforge eval`");
  cmd->add_option("--model", o.model, "Checkpoint directory (Hugging Face layout)")->required();
  cmd->add_option("--tasks", o.tasks, "\"builtin\" or a task file (default: builtin)");
  cmd->add_option("--category", o.categories, "Keep only these categories")->delimiter(',');
  cmd->add_option("--out,-o", o.out, "Output directory")->required();
  cmd->add_option("--samples,-G", o.samples, "Samples per task, 1-1024 (default 8)");
  cmd->add_option("--temperature", o.temperature, "Sampling temperature (default 0.8)");
  cmd->add_option("--top-p", o.top_p, "Nucleus mass (default 1)");
  cmd->add_option("--max-new-tokens", o.max_new_tokens, "Tokens per sample, at most; 1-131072 (default 1024)");
  cmd->add_option("--batch", o.batch, "Tasks per generate call, 1-1024 (default 8)");
  cmd->add_option("--seed", o.seed, "Sampling seed (default 0)");
  cmd->add_option("--gpu", o.gpu, "CUDA ordinal (default: -1, the CPU)");
  cmd->add_flag("--no-gpu-facts", o.no_gpu_facts, "Prompts state no GPU facts");
  cmd->add_option("--prompt-template", o.prompt_template, "Prompt template file");
  cmd->add_flag("--profile-ops", o.profile_ops, "Print the host time spent in each LibTorch op (all calls)");
  return cmd;
}

}  // namespace kforge::pipeline

#pragma once
// The flags of `kforge corpus`, for commands/cli.cpp (header-only: only the kforge executable,
// which links CLI11, includes it).

#include <CLI/CLI.hpp>

#include "corpus/corpus_command.hpp"

namespace kforge::corpus {

inline CLI::App* add_corpus_subcommand(CLI::App& app, corpus_options& opt) {
  auto* cmd = app.add_subcommand("corpus", "Pretraining corpus of kernels written by the project");
  cmd->require_subcommand(1);
  auto* build = cmd->add_subcommand(
      "build", "Write kernel variants, their prompts and completions for a task set");
  build->add_option("--tasks", opt.tasks,
                    "builtin (default), a task file (.jsonl), or synth:COUNT:SEED");
  build->add_option("--category", opt.categories,
                    "Only these categories (comma-separated: elementwise,reduction,...)")
      ->delimiter(',');
  build->add_option("--out,-o", opt.out, "Output directory")->required();
  build->add_option("--gpu-facts", opt.gpu_facts,
                    "TOML file with [tasks.gpu] keys for the prompts (default: unknown)");
  build->add_option("--gpu", opt.gpu,
                    "Probe this GPU for the prompts' facts, as a run does (instead of --gpu-facts); repair drills are "
                    "judged on it, so their breakages include those only a run shows (a wrong answer, a fault)");
  build->add_option("--prompt-template", opt.prompt_template,
                    "Prompt template file, as a run's [tasks] prompt_template (default: the embedded one)");
  build->add_option("--verdicts", opt.verdicts,
                    "`kforge eval` verdict lines: keep only ok variants, with their speedup");
  build->add_option("--copy-drills", opt.copy_drills,
                    "Also write N copy drills: the restatement alone, of scrambled references (default 0)")
      ->check(CLI::NonNegativeNumber);
  build->add_option("--lowering-drills", opt.lowering_drills,
                    "Also write N lowering drills: scrambled elementwise tasks, cut after kf_op and its map kernel (default 0)")
      ->check(CLI::NonNegativeNumber);
  build->add_option("--exclude", opt.exclude,
                    "Task files (or builtin) no lowering drill may repeat: the held-out tasks");
  build->add_option("--repair-drills", opt.repair_drills,
                    "Also write N repair drills: a kept kernel broken by one edit, the sandbox's observation of it, "
                    "then the kernel (two turns; default 0)")
      ->check(CLI::NonNegativeNumber);
  build->add_flag("--speed-drills", opt.speed_drills,
                  "Also write speed drills (with --verdicts): per task, its slowest kept variant, that verdict's "
                  "observation, then its fastest, where they differ by 1.25x or more");
  build->add_option("--drill-seed", opt.drill_seed, "Seed of the drills (default 1)");
  return cmd;
}

}  // namespace kforge::corpus

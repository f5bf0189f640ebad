#pragma once
// The flags of `kforge eval` and the sandbox's hidden child commands, for commands/cli.cpp
// (header-only: only the kforge executable links CLI11).
#include <CLI/CLI.hpp>

#include "sandbox/eval_command.hpp"
#include "sandbox/eval_compare.hpp"

namespace kforge::sandbox {

inline CLI::App* add_eval_subcommand(CLI::App& app, eval_options& opt) {
  auto* cmd = app.add_subcommand(
      "eval", "Run candidate kernels through the sandbox: one verdict per DIR/<task id>/*.cu, "
              "then a KernelBench-style summary");
  cmd->add_option("--tasks", opt.tasks, "Task file (JSON Lines); default: the built-in library");
  cmd->add_option("--candidates", opt.candidates, "Folder of <task id>/*.cu")->required();
  cmd->add_option("--out,-o", opt.out, "Verdicts as JSON lines (default: stdout)");
  cmd->add_option("--summary", opt.summary, "Also write the summary as JSON here");
  cmd->add_option("--jobs,-j", opt.jobs, "Worker threads (default: cores, at most 16)");
  cmd->add_option("--runners-per-gpu", opt.runners_per_gpu, "Candidate children per GPU");
  cmd->add_option("--gpus", opt.gpus, "CUDA ordinals to use (default: every visible GPU)")
      ->delimiter(',');
  cmd->add_flag("--compile-only", opt.compile_only, "Static checks and compile only");
  cmd->add_option("--seed", opt.seed, "Input seed (default: random, printed)");
  cmd->add_option("--cache", opt.cache, "Compile cache (default: ~/.cache/kforge/compile)");
  cmd->add_flag("--no-cache", opt.no_cache, "Compile every candidate afresh");
  cmd->add_flag_callback("--no-retry", [&opt] { opt.retry_infra_alone = false; },
                         "Judge a candidate out of memory once (default: once more at the end, alone on its GPU)");
  cmd->add_flag("--reuse-repeats", opt.reuse_repeats,
                "Judge a task's identical sources once (they share inputs); copies say \"reused\"");
  cmd->add_option("--arch", opt.arch,
                  "nvcc target, e.g. sm_80, sm_89, sm_90a, sm_100a (default auto: the sandbox GPU's "
                  "architecture; sm_90a with no GPU)");
  cmd->add_option("--time-limit-ms", opt.time_limit_ms, "Per-candidate verify + time budget");
  cmd->add_option("--slow-cutoff", opt.slow_cutoff,
                  "Time a kernel over this many times the eager baseline in 3 trials, not 30 "
                  "(default 20; 0: never)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag_callback("--no-confine", [&opt] { opt.confine = false; },
                         "Run candidate children without OS confinement and seccomp (trusted kernels only)");
  cmd->add_option("--confirm-speedup", opt.confirm_speedup,
                  "Time a speedup over eager above this again in a fresh child on fresh inputs; it keeps its "
                  "timing only if confirmed (default 5; 0: never)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--baselines", opt.baselines,
                  "Eager and torch.compile times (kforge tasks baseline --against compile --out): "
                  "also report speedups and fast_p against torch.compile, for the tasks measured on "
                  "this sandbox's GPU model");
  return cmd;
}

inline CLI::App* add_compare_subcommand(CLI::App& app, compare_options& opt) {
  auto* cmd = app.add_subcommand(
      "compare", "Compare two kforge eval verdict files of the same tasks: pass rate and mean "
                 "speedup per side, their differences with a paired bootstrap interval over tasks");
  cmd->add_option("before", opt.before, "Verdict lines (kforge eval --out) of the first model")->required();
  cmd->add_option("after", opt.after, "Verdict lines of the second model, same tasks")->required();
  cmd->add_option("--json", opt.json, "Also write the comparison as JSON here");
  cmd->add_option("--resamples", opt.resamples, "Bootstrap resamples (default 10000)");
  cmd->add_option("--seed", opt.seed, "Bootstrap seed (default 1)");
  cmd->add_flag("--best-of-task", opt.best_of_task,
                "A task passes when any of its samples is correct, at its best speedup: two ways of spending "
                "the same budget compared");
  return cmd;
}

/// `sandbox-child` and `sandbox-ref`: started by the sandbox itself, hidden from --help.
inline std::pair<CLI::App*, CLI::App*> add_sandbox_children(CLI::App& app) {
  auto* child = app.add_subcommand("sandbox-child", "Sandbox candidate child (internal)");
  auto* ref = app.add_subcommand("sandbox-ref", "Sandbox reference server (internal)");
  child->group("");
  ref->group("");
  return {child, ref};
}

}  // namespace kforge::sandbox

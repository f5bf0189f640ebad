#pragma once
// The flags of `kforge tasks`, for commands/cli.cpp (header-only: only the kforge executable,
// which links CLI11, includes it). Kept here so the command and its flags change together.

#include <CLI/CLI.hpp>

#include <ostream>

#include "tasks/tasks_command.hpp"

namespace kforge::tasks {

/// Adds `tasks` and its subcommands to `app`, filling `opt`; after parsing, when the returned
/// subcommand was given, run_tasks_subcommand runs it.
inline CLI::App* add_tasks_subcommand(CLI::App& app, tasks_options& opt) {
  auto* cmd = app.add_subcommand("tasks", "Task library: list, show, validate, synthesize, time and "
                                          "import tasks");
  cmd->require_subcommand(1);
  auto* list = cmd->add_subcommand("list", "List tasks (default: the built-in library)");
  list->add_option("--category,-c", opt.category,
                   "Only this category (elementwise, reduction, normalization, gemm, conv, "
                   "fused, other)");
  list->add_option("--file,-f", opt.files, "Task file(s) instead of the built-in library");
  auto* show = cmd->add_subcommand("show", "Print one task as JSON");
  show->add_option("id", opt.id, "Task id")->required();
  show->add_option("--file,-f", opt.files, "Task file(s) instead of the built-in library");
  auto* validate = cmd->add_subcommand(
      "validate", "Parse, compile and run every reference at its smallest shapes, with the "
                  "degenerate-task checks");
  validate->add_option("file", opt.files, "Task file(s); default: the built-in library");
  validate->add_option("--device", opt.device, "cpu, cuda or cuda:N (default cpu)");
  validate->add_option("--shapes", opt.shapes,
                       "smallest (default), variants (every variant) or all (the primary shapes "
                       "too)")
      ->check(CLI::IsMember({"smallest", "variants", "all"}));
  validate->add_option("--time-limit-s", opt.time_limit_s,
                       "Seconds a task's checks at one shape set may take before its reference "
                       "is stopped and the task fails (default 120)")
      ->check(CLI::PositiveNumber);
  // validate's child, which runs the checks where they can be stopped: not for people.
  cmd->add_subcommand("check-server", "Serve validate's checks on fd 3")->group("");
  auto* synth = cmd->add_subcommand(
      "synth", "Synthesize tasks: chains of 1-5 catalogue ops, kept when they run, are "
               "deterministic, not degenerate and in the eager-time window; deduplicated by op "
               "signature. Ends with a count per rejection reason");
  synth->add_option("--count,-n", opt.count, "Tasks to keep, 1-100000 (default 100)")
      ->check(CLI::Range(1, max_synth_count));
  synth->add_option("--seed", opt.seed, "Seed; the same seed gives the same tasks (default 1)");
  synth->add_option("--out,-o", opt.out, "JSON Lines file for the kept tasks")->required();
  synth->add_option("--device", opt.device,
                    "auto (default: cuda when visible, else cpu at reduced shapes), cpu, cuda or "
                    "cuda:N");
  synth->add_option("--max-ops", opt.max_ops, "Longest op chain, 1-5 (default 5)")
      ->check(CLI::Range(1, 5));
  synth->add_option("--exclude", opt.exclude,
                    "Benchmark task file(s), or 'builtin' for the built-in library: drop tasks "
                    "with the same signature, reference or op skeleton (contamination)");
  synth->add_option("--max-seconds", opt.max_seconds,
                    "Stop after this long, still writing the table (default: no limit)");
  synth->add_option("--max-tries", opt.max_tries,
                    "Candidates to try before giving up (default 50 x count)");
  synth->add_option("--min-ms", opt.min_ms, "Eager-time window, low end in ms (default 0.1)");
  synth->add_option("--max-ms", opt.max_ms, "Eager-time window, high end in ms (default 20)");
  synth->add_option("--trials", opt.trials, "Timed trials per candidate on a GPU (default 10)")
      ->check(CLI::Range(1, max_timed_trials));
  synth->add_flag("--verbose,-v", opt.verbose, "One line per candidate: kept, or why not");
  synth->preparse_callback([&opt](std::size_t) {
    opt.device = "auto";
    opt.trials = 10;
  });
  auto* baseline = cmd->add_subcommand(
      "baseline", "Time every reference eagerly (CUDA events, L2 flushed) and write the times");
  baseline->add_option("file", opt.files, "Task file(s); default: the built-in library");
  baseline->add_option("--device", opt.device, "cuda (default), cuda:N or cpu");
  baseline->add_option("--out,-o", opt.out, "JSON Lines file for the timings");
  baseline->add_option("--trials", opt.trials, "Timed trials per reference (default 30)")
      ->check(CLI::Range(1, max_timed_trials));
  baseline->add_option("--shapes", opt.shapes, "primary (default) or smallest")
      ->check(CLI::IsMember({"primary", "smallest"}));
  baseline->add_option("--against", opt.against,
                       "eager (default: LibTorch times each reference) or compile (the machine's "
                       "Python torch >= 2.0 times eager and torch.compile; --out required)")
      ->check(CLI::IsMember({"eager", "compile"}));
  baseline->add_option("--mode", opt.compile.mode,
                       "With --against compile: torch.compile mode (default, reduce-overhead, "
                       "max-autotune, max-autotune-no-cudagraphs; default: default)")
      ->check(CLI::IsMember(compile_modes()));
  baseline->add_flag("--eager-only", opt.compile.eager_only,
                     "With --against compile: time eager alone in Python (a torch without torch.compile)");
  baseline->preparse_callback([&opt](std::size_t) {
    opt.device = "cuda";
    opt.shapes = "primary";
  });
  auto* kb = cmd->add_subcommand(
      "import-kernelbench", "KernelBench problem files (Model, get_inputs, get_init_inputs) into kforge "
                            "tasks, by the machine's Python torch; the problems not converted are listed "
                            "with the reason");
  kb->add_option("paths", opt.kernelbench.paths, "Problem files or folders (e.g. KernelBench/level1)")->required();
  kb->add_option("--out,-o", opt.kernelbench.out, "Task file to write (JSON Lines)")->required();
  kb->add_option("--failures", opt.kernelbench.failures, "JSON Lines of the problems not converted");
  kb->add_option("--scale", opt.kernelbench.scale,
                 "Divide the problems' size globals by this, for a quick check (default 1)")
      ->check(CLI::PositiveNumber);
  kb->add_option("--cpu-budget", opt.kernelbench.cpu_budget_gib,
                 "GiB of inputs and parameters a trace on the CPU may hold (default 2)");
  kb->add_option("--jobs,-j", opt.kernelbench.jobs,
                 "Problems converted at once, each in a process of its own, each with up to --cpu-budget "
                 "(default: the cores, at most 8)")
      ->check(CLI::PositiveNumber);
  return cmd;
}

/// Runs the parsed `tasks` subcommand; returns the exit code of tasks_command.
inline int run_tasks_subcommand(const CLI::App& tasks_cmd, tasks_options& opt,
                                std::ostream& out, std::ostream& err) {
  for (const auto* sub : tasks_cmd.get_subcommands()) opt.action = sub->get_name();
  return tasks_command(opt, out, err);
}

}  // namespace kforge::tasks

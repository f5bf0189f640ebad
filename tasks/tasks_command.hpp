#pragma once
// `kforge tasks ...`: the task library from the command line.
//
//   kforge tasks list [--category C] [--file F ...]       ids, categories and primary shapes
//   kforge tasks show ID [--file F ...]                   one task as indented JSON
//   kforge tasks validate [FILE ...] [--device D] [--shapes smallest|variants|all]
//                         [--time-limit-s S]              parse, compile and run each reference
//                                                         (CPU, smallest shapes) with the
//                                                         degenerate-task checks of task_check.hpp,
//                                                         in a child process stopped after S s
//   kforge tasks synth --count N --seed S --out FILE [--device D] [--max-ops K]
//                      [--exclude F|builtin ...] [--max-tries T] [--max-seconds X]
//                      [--min-ms A --max-ms B] [--trials R] [--verbose]
//                                                         synthesize tasks (tasks/synth_run.hpp)
//                                                         and print the rejection table
//   kforge tasks baseline [FILE ...] [--device D] [--out F] eager time of every reference
//   kforge tasks baseline [FILE ...] --against compile --out F [--device D] [--mode M]
//                                                         eager and torch.compile times by the
//                                                         machine's Python torch (compile_baseline.hpp)
// Without files, the built-in library is used.

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "tasks/compile_baseline.hpp"
#include "tasks/kernelbench_import.hpp"

namespace kforge::tasks {

/// Upper bounds of synth's --count and the --trials of synth and baseline: far above any real
/// setting (each kept task and each trial is held in memory), so a larger value is a typo.
inline constexpr int max_synth_count = 100000;
inline constexpr int max_timed_trials = 100000;

struct tasks_options {
  /// list, show, validate, synth, baseline or import-kernelbench.
  std::string action;
  /// import-kernelbench: its own options (tasks/kernelbench_import.hpp).
  kernelbench_import_options kernelbench;
  /// Task files (`.json`: one task; else JSON Lines); empty: the built-in library.
  std::vector<std::string> files;
  /// show: the task id.
  std::string id;
  /// list: only this category.
  std::optional<std::string> category;
  /// validate, baseline, synth: where references run ("cpu", "cuda", "cuda:N"; synth also
  /// "auto": cuda when visible, else cpu).
  std::string device = "cpu";
  /// validate: which shapes to run: "smallest" (what CI runs), "variants" (every variant) or
  /// "all" (the primary shapes too: slow on a CPU, they are sized for an H200).
  std::string shapes = "smallest";
  /// validate: seconds one task's checks at one shape set may take, compile included; past it the
  /// reference is stopped and the task fails. > 0.
  double time_limit_s = 120.0;
  /// validate: the program that runs the checks (tasks/check_server.hpp); empty: this executable
  /// as `kforge tasks check-server`.
  std::vector<std::string> check_server;
  /// baseline: "eager" (LibTorch times the references) or "compile" (compile_baseline.hpp).
  std::string against = "eager";
  /// baseline --against compile: its mode and eager_only (files, out, device, shapes and trials
  /// are the fields above).
  compile_baseline_options compile;
  /// baseline: JSON Lines file of the timings (empty: only the table); synth: of the kept tasks.
  std::string out;
  /// baseline, synth: timed trials per reference (the median is reported / filtered on).
  int trials = 30;
  /// synth: tasks to keep.
  int count = 100;
  /// synth: the seed; the same seed gives the same tasks.
  std::uint64_t seed = 1;
  /// synth: longest op chain (1-5).
  int max_ops = 5;
  /// synth: candidates to try before giving up (0: 50 x count).
  int max_tries = 0;
  /// synth: benchmark task files whose tasks must not be repeated ("builtin": the library).
  std::vector<std::string> exclude;
  /// synth: stop after this many seconds, still printing the table (0: no limit).
  double max_seconds = 0.0;
  /// synth: the eager-time window in ms (measured on a GPU, estimated on the CPU).
  double min_ms = 0.1;
  double max_ms = 20.0;
  /// synth: one line per candidate on the error stream.
  bool verbose = false;
};

/// Runs `action` ("check-server": serve_task_checks, the child of validate).
/// Returns the exit code: 0 success; 1 a task failed validation, a reference failed to time, or
/// synth kept fewer than --count tasks within --max-tries; 2 bad input (unreadable or malformed
/// file, unknown id or category, bad device, bad option); 3 not available in this build.
int tasks_command(const tasks_options& opt, std::ostream& out, std::ostream& err);

}  // namespace kforge::tasks

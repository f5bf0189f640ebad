#pragma once
// `kforge tasks ...`: the task library from the command line.
//
//   kforge tasks list [--category C] [--file F ...]       ids, categories and primary shapes
//   kforge tasks show ID [--file F ...]                   one task as indented JSON
//   kforge tasks validate [FILE ...] [--device D] [--shapes smallest|variants|all]
//                                                         parse, compile and run each reference
//                                                         (CPU, smallest shapes) with the
//                                                         degenerate-task checks of task_check.hpp
//   kforge tasks synth | baseline                         not available yet (exit 3)
// Without files, the built-in library is used.

#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

namespace kforge::tasks {

struct tasks_options {
  /// list, show, validate, synth or baseline.
  std::string action;
  /// Task files (`.json`: one task; else JSON Lines); empty: the built-in library.
  std::vector<std::string> files;
  /// show: the task id.
  std::string id;
  /// list: only this category.
  std::optional<std::string> category;
  /// validate: where references run ("cpu", "cuda", "cuda:N").
  std::string device = "cpu";
  /// validate: which shapes to run: "smallest" (what CI runs), "variants" (every variant) or
  /// "all" (the primary shapes too: slow on a CPU, they are sized for an H200).
  std::string shapes = "smallest";
  /// baseline: JSON Lines file of the timings (empty: only the table).
  std::string out;
  /// baseline: timed trials per reference (the median is reported).
  int trials = 30;
};

/// Returns the exit code: 0 success; 1 a task failed validation; 2 bad input (unreadable or
/// malformed file, unknown id or category, bad device); 3 not available in this build or yet.
int tasks_command(const tasks_options& opt, std::ostream& out, std::ostream& err);

}  // namespace kforge::tasks

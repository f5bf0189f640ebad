#pragma once
// Settings of the task generator, from the manifest's [tasks] table. Header-only like the other
// option structs; stages/task_generator.cpp turns them into tasks::curriculum_options and the
// prompt's hardware context.

#include <cstddef>
#include <string>
#include <vector>

#include "common/gpu_facts.hpp"

namespace kforge {

/// Where the task pool comes from.
enum class task_source_kind {
  builtin,   ///< the built-in library (tasks/builtin/) plus `files`: the real task generator
  files,     ///< `files` alone: a pool without the built-ins (e.g. RL on a train split only)
  stand_in,  ///< synthetic element-wise tasks with a one-line prompt (tests that need them)
};

/// How the next task is picked (tasks::sampling_mode).
enum class task_sampling {
  curriculum,  ///< favour tasks whose recent pass rate is neither 0 nor 1
  uniform,     ///< every task equally likely
};

/// Upper bound of window: the curriculum keeps that many results for every task.
inline constexpr std::size_t max_curriculum_window = 1 << 16;

struct tasks_options {
  /// "builtin", "files" or "stand-in" (see task_source_kind).
  task_source_kind source = task_source_kind::builtin;
  /// Task files (JSON Lines, or one .json object) whose tasks join the built-in ones (or, with
  /// source "files", make the whole pool). Relative
  /// paths are read from the directory kforge runs in. An unreadable file, a bad task or an id
  /// that is already in the pool stops the run at start-up.
  std::vector<std::string> files;
  /// "curriculum" or "uniform".
  task_sampling sampling = task_sampling::curriculum;
  /// Results per task in the curriculum's sliding window. In [1, max_curriculum_window].
  std::size_t window = 32;
  /// Added to every seen task's p(1 - p) weight, so solved and hopeless tasks still come up. >= 0.
  double floor = 0.02;
  /// Added to an unseen task's weight, so every task gets tried. >= 0.
  double unseen_bonus = 0.25;
  /// A prompt template file (tasks/prompt.hpp); empty: the embedded tasks/prompt_template.txt.
  std::string prompt_template;
  /// The GPU the prompts describe ([tasks.gpu]); a field left 0/empty reads "unknown".
  gpu_facts gpu;
};

}  // namespace kforge

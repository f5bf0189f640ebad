#pragma once
// The task set a command's --tasks flag names, kept to its --category filter: what `kforge sample`
// and `kforge corpus build` (and any later command that takes a task set) share.

#include <ostream>
#include <string>
#include <vector>

#include "common/result.hpp"
#include "tasks/task.hpp"

namespace kforge::tasks {

/// `spec`: "builtin" (the built-in library), "synth:COUNT:SEED" (COUNT tasks synthesized on the
/// CPU from SEED, a summary line to `log`; needs a build with LibTorch) or a task file (.jsonl / .json).
/// `categories`: category names to keep (empty: all). Errors name the flag and what is wrong.
[[nodiscard]] result<std::vector<task>> load_task_spec(const std::string& spec,
                                                       const std::vector<std::string>& categories,
                                                       std::ostream& log);

}  // namespace kforge::tasks

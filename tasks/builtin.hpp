#pragma once
// The built-in task library: the JSON Lines files under tasks/builtin/, embedded into the binary
// at build time (tasks/embed_builtin.cmake), so `kforge` needs no data files at run time. The
// committed .jsonl files are the source of truth; tasks/builtin/generate.py wrote their first
// version and is not needed to build.

#include <string_view>
#include <vector>

#include "common/result.hpp"
#include "tasks/task.hpp"

namespace kforge::tasks {

/// One embedded file: its name under tasks/builtin/ and its text.
struct builtin_file {
  std::string_view name;
  std::string_view text;
};

/// Every embedded file, in the order tasks/CMakeLists.txt lists them.
const std::vector<builtin_file>& builtin_files();

/// Every built-in task (ids unique across the files), parsed on each call; provenance is
/// "builtin:<file>". An error here is a bug in a committed file, named with its line.
result<std::vector<task>> builtin_tasks();

}  // namespace kforge::tasks

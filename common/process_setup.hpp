#pragma once
// What run_limited (subprocess.hpp) and child_process (child_process.hpp) share when they start a
// program: the argument and environment arrays built before fork, and the async-signal-safe steps
// the child takes between fork and exec (own process group, rlimits, closed descriptors).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kforge::detail {

/// argv[0] looked up in PATH unless it holds a '/'.
std::string resolve_program(const std::string& prog);

/// Environment for a child: ours (or, with `scrub`, only the variables named in `keep`) with
/// `overrides` replacing same-named entries.
std::vector<std::string> child_environment(
    const std::vector<std::pair<std::string, std::string>>& overrides, bool scrub,
    const std::vector<std::string>& keep);

/// Null-terminated char* views of strings that outlive them.
std::vector<char*> c_strings(const std::vector<std::string>& strings);

struct child_rlimits {
  std::uint64_t address_space = 0;
  std::uint64_t file_size = 0;
  std::uint64_t cpu_seconds = 0;
  std::uint64_t processes = 0;
  bool core_dumps = false;
};

/// In the forked child, before exec: own process group, the limits, then every descriptor from
/// `first_closed` up closed. Async-signal-safe only.
void child_prepare(const child_rlimits& limits, int first_closed) noexcept;

/// Writes `msg` to fd 2 and _exit(127): a child that could not reach exec.
[[noreturn]] void child_fail(const char* msg) noexcept;

}  // namespace kforge::detail

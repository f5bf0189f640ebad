#pragma once
// Run a program and capture its output, with a time limit. Used for tool probes (nvcc --version,
// a known-good compile) and by the launcher; the sandbox's hardened child runner builds on the
// same primitives later.

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "common/result.hpp"

namespace kforge {

struct process_output {
  int exit_code = -1;       ///< exit status, or -1 when killed by a signal
  int signal = 0;           ///< the terminating signal, 0 if it exited
  bool timed_out = false;   ///< killed because it ran past the limit
  std::string output;       ///< stdout and stderr interleaved, cut at max_output bytes
  double seconds = 0;
};

/// Runs argv[0] (looked up in PATH) with stdin closed, in its own process group, killing the group
/// after `timeout`. Fails only if the program could not be started at all.
result<process_output> run_process(const std::vector<std::string>& argv,
                                   std::chrono::milliseconds timeout,
                                   std::size_t max_output = 1 << 20);

/// Path of the running executable (/proc/self/exe), for spawning more of ourselves.
std::string self_executable();

}  // namespace kforge

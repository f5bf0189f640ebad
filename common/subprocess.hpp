#pragma once
// Run a program and capture its output, under a time limit and, where asked, resource limits: its
// own process group killed as a whole at the deadline, rlimits set in the child before exec, a
// chosen working directory and environment. Tool probes use run_process; the sandbox runs nvcc
// (and later the candidate's child) with run_limited.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
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

/// Limits for one run. Zero means "leave as inherited".
struct process_limits {
  /// Wall-clock limit; at the deadline the whole process group gets SIGKILL.
  std::chrono::milliseconds time{60'000};
  /// RLIMIT_AS of every process in the tree (each process on its own, not the sum). Fine for
  /// nvcc and its helpers; never use it for processes that create a CUDA context.
  std::uint64_t address_space_bytes = 0;
  /// RLIMIT_FSIZE: the largest file any process may write (SIGXFSZ past it).
  std::uint64_t file_size_bytes = 0;
  /// RLIMIT_CPU in seconds, a backstop to `time` for CPU-bound runaways.
  std::uint64_t cpu_seconds = 0;
  /// Core dumps stay off unless asked for: a crashing tool must not write gigabytes.
  bool core_dumps = false;
  /// Working directory of the child; empty keeps ours.
  std::string working_dir;
  /// Variables set (or replaced) in the child's environment, e.g. TMPDIR.
  std::vector<std::pair<std::string, std::string>> env;
  /// Captured output (stdout and stderr interleaved) is cut at this many bytes.
  std::size_t max_output = 1 << 20;
};

/// Runs argv (argv[0] an absolute path or looked up in PATH before forking) under `limits`.
/// Fails only if the program could not be started at all; a killed or failing program is a
/// process_output with timed_out / signal / exit_code set.
result<process_output> run_limited(const std::vector<std::string>& argv,
                                   const process_limits& limits);

/// run_limited with only a time limit and an output bound.
result<process_output> run_process(const std::vector<std::string>& argv,
                                   std::chrono::milliseconds timeout,
                                   std::size_t max_output = 1 << 20);

/// Path of the running executable (/proc/self/exe), for spawning more of ourselves.
std::string self_executable();

}  // namespace kforge

#pragma once
// Settings of the sandbox (pool and workers), from the manifest's [sandbox] table.

#include <algorithm>
#include <string>
#include <vector>

namespace kforge {

/// Which sandbox the workers run.
enum class sandbox_backend {
  stand_in,  ///< synthetic verdicts, nothing compiled (checks the machinery without a GPU)
  nvcc,      ///< the real sandbox: static checks, nvcc, and on a GPU verification and timing
};

/// Which repeated kernels get a copy of an earlier verdict instead of being judged again
/// (stages/verdict_reuse.hpp).
enum class verdict_reuse_scope {
  off,    ///< every candidate is judged
  group,  ///< a repeat within its GRPO group, checked on the same input sets
  task,   ///< also a kernel judged earlier in the run for the same prompt
};

/// When the sandbox takes an Nsight Compute profile of a correct kernel (sandbox/ncu_profiler.hpp).
enum class sandbox_profile_mode {
  off,       ///< never
  episodes,  ///< where an observation will show it: agent.max_turns > 1 and "profile" in agent.feedback
  always,    ///< every correct kernel of the run (its verdict carries the profile)
};

/// Whether `mode` asks for profiles given the agent's settings: `feedback` empty means every kind.
inline bool sandbox_profiles_wanted(sandbox_profile_mode mode, int max_turns, const std::vector<std::string>& feedback) {
  if (mode != sandbox_profile_mode::episodes) return mode == sandbox_profile_mode::always;
  if (max_turns <= 1) return false;
  return feedback.empty() || std::find(feedback.begin(), feedback.end(), "profile") != feedback.end();
}

/// Upper bounds of the counts below: each runner and compile job is a process, each trial a GPU
/// run; far above any real setting, a larger value is a typo.
inline constexpr int max_runners_per_gpu = 64;
inline constexpr int max_compile_jobs = 256;
inline constexpr int max_trials = 100000;

struct sandbox_options {
  /// "stand-in" (the built-in value; the embedded default manifest sets "nvcc") or "nvcc".
  sandbox_backend backend = sandbox_backend::stand_in;
  /// Candidate children (run workers) per GPU of the worker's group. In [1, max_runners_per_gpu].
  int runners_per_gpu = 4;
  /// Reference server processes per GPU (expected outputs, baseline timing; each with its own CUDA
  /// context); a candidate's task picks one. 0: one per runner. >= 0.
  int reference_servers = 0;
  /// The nvcc target candidates are compiled for: "auto" (the architecture of the sandbox's first
  /// GPU, from its compute capability: sm_80, sm_89, sm_90a, sm_100a, sm_120, ...; sm_90a on a
  /// compile-only host) or one target such as "sm_80" (common/gpu_arch.hpp valid_arch).
  std::string arch = "auto";
  /// Compile cache directory; empty: RUN_DIR/compile-cache.
  std::string cache_dir;
  /// Wall-clock limit for one candidate (compile + verify + time), in seconds. > 0.
  double timeout_s = 60.0;
  /// Timed trials per kernel; the median is reported. >= 30 (docs/sandbox.md: honest timing),
  /// at most max_trials.
  int trials = 30;
  /// A kernel whose first 3 trials each take over this many times the eager baseline's median is
  /// timed in those 3 (sandbox/runner.hpp: run_options::slow_cutoff). 0: never cut. >= 0.
  double slow_cutoff = 20.0;
  /// Candidate children run confined: their own user, mount, PID, network and IPC namespaces, a
  /// read-only root, an unprivileged user, no_new_privs and a seccomp filter (as far as the host
  /// grants them; what it does not is named in the run's banner). false: none of it.
  bool confine = true;
  /// A speedup over eager above this is timed again in a fresh child on fresh inputs and keeps its
  /// timing only if confirmed (sandbox/runner.hpp: run_options::confirm_speedup). 0: never. >= 0.
  double confirm_speedup = 5.0;
  /// Candidates one sandbox worker judges at once (its bus worker's capacity): each compiles with
  /// its own nvcc, CPU work that overlaps verification and timing on the GPU, so it scales
  /// separately from the number of sandbox_worker actors. In [1, max_compile_jobs].
  int compile_jobs = 2;
  /// Which repeats are not judged again (the nvcc sandbox; the stand-in judges nothing anyway).
  verdict_reuse_scope reuse_verdicts = verdict_reuse_scope::group;
  /// Nsight Compute profiles of correct kernels: "off", "episodes" or "always"
  /// (sandbox_profile_mode). Each costs seconds of exclusive GPU time.
  sandbox_profile_mode profile = sandbox_profile_mode::episodes;
  /// Wall-clock limit of one profile, in seconds; a profile past it is dropped (the verdict
  /// stands). In (0, 600].
  double profile_time_limit_s = 60.0;
  /// ncu's path; empty: $KFORGE_NCU, PATH, /usr/local/cuda/bin/ncu.
  std::string ncu;
  /// Milliseconds the stand-in sandbox (used until the real one is built) spends per candidate. It
  /// compiles and runs nothing; the delay only keeps work in flight, as real workers would. >= 0.
  int stand_in_ms = 0;
};

}  // namespace kforge

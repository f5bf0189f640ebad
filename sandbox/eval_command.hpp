#pragma once
// `kforge eval --tasks FILE.jsonl --candidates DIR`: every DIR/<task id>/*.cu through the sandbox,
// one verdict per candidate as JSON lines, then a KernelBench-style summary (correctness rate,
// fast_p for p = 0, 1, 1.5, 2, geometric-mean speedup of the correct ones, counts per verdict).
// Runs without the rest of the pipeline.
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.hpp"
#include "messages/rollout_generated.h"
#include "tasks/task.hpp"

namespace kforge::sandbox {

struct eval_options {
  std::string tasks;        ///< task file (JSON Lines); empty: the built-in library
  std::string candidates;   ///< DIR holding <task id>/*.cu
  std::string out;          ///< verdict lines; empty: stdout
  std::string summary;      ///< summary JSON file; empty: none (it is printed either way)
  int jobs = 0;             ///< worker threads; 0: the number of cores, at most 16
  int runners_per_gpu = 4;
  std::vector<int> gpus;    ///< empty: every visible GPU
  bool compile_only = false;
  std::uint64_t seed = 0;   ///< 0: a random seed (printed)
  std::string cache;        ///< compile cache; empty: $XDG_CACHE_HOME/kforge/compile
  bool no_cache = false;
  /// nvcc target; "auto": the first GPU's (sm_90a with none), sandbox/pool.hpp resolve_arch.
  std::string arch = "auto";
  int time_limit_ms = 20'000;
  /// A task's repeated sources are judged once (sandbox/repeat_verdicts.hpp): a task's
  /// candidates share their inputs, so a repeat's verdict line is the first's, marked "reused".
  bool reuse_repeats = false;
  /// run_options::slow_cutoff: a kernel over this many times the baseline is timed in 3 trials.
  double slow_cutoff = 20.0;
  /// run_options::confine: candidate children confined by the OS and seccomp (false: neither).
  bool confine = true;
  /// run_options::confirm_speedup: speedups above this are timed again in a fresh child.
  double confirm_speedup = 5.0;
  /// Eager and torch.compile times (tasks/measured_baselines.hpp); empty: against eager only.
  std::string baselines;
  /// Candidates judged infra_error for want of memory are judged once more after the others, one
  /// at a time in a fresh pool, so alone on their GPU (retry_infra_alone): a large KernelBench
  /// problem beside others can find the GPU's memory short, which is not the kernel's doing.
  bool retry_infra_alone = true;
};

class sandbox_pool;
class repeat_verdicts;

/// `source` as a candidate for `t`, judged as `kforge eval` judges it: inputs seeded per task from
/// `seed`, so every candidate of a task (and every command given the same seed) is checked on the
/// same inputs and the reference server computes them once; with `repeats`, a task's repeated
/// source judged once.
result<wire::VerdictT> judge_for_task(sandbox_pool& pool, const tasks::task& t, const std::string& source,
                                      std::uint64_t seed, repeat_verdicts* repeats);

/// One candidate's line in the verdict file.
struct eval_item {
  std::string task;
  std::string file;
};

/// The summary over verdict lines (each with "status" and, when ok, "speedup").
nlohmann::json summarize_verdicts(const std::vector<nlohmann::json>& verdicts);

/// The infra_error lines of `verdicts` whose reason is the GPU (or host) out of memory judged again
/// by `judge(i)`, one after another; each new line replaces the old, marked "retried_alone" with
/// the old reason as "first_reason". How many were. Other infra errors (a toolchain missing, a
/// server that keeps failing) would fail again, one slow retry after another: not retried.
std::size_t retry_infra_alone(std::vector<nlohmann::json>& verdicts,
                              const std::function<nlohmann::json(std::size_t)>& judge);

/// Human-readable form of summarize_verdicts' result.
std::string format_summary(const nlohmann::json& summary);

int eval_command(const eval_options& options, std::ostream& out, std::ostream& err);

/// The compile cache of commands run by hand: $XDG_CACHE_HOME/kforge/compile, else
/// ~/.cache/kforge/compile, else /tmp/kforge-compile-cache.
std::string default_compile_cache();

}  // namespace kforge::sandbox

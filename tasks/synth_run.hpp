#pragma once
// Task synthesis, the execution-driven part: screening a candidate task by running it (the
// degenerate-task checks of tasks/task_check.hpp, sorted into rejection reasons, plus a timing on
// the GPU) and the loop behind `kforge tasks synth`: generate (tasks/synth.hpp), filter, write
// the kept tasks as JSON lines, count every rejection by reason. Torch-free header and source;
// the functions exist only in builds with LibTorch (KFORGE_TASKS_WITH_TORCH).

#include <array>
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "common/result.hpp"
#include "tasks/synth.hpp"
#include "tasks/task.hpp"
#include "tasks/tensor_list.hpp"

namespace kforge::tasks::synth {

/// The reason a problem line of check_task_runs (tasks/task_check.hpp) stands for; lines it does
/// not recognise are does_not_run (compile and run errors carry TorchScript's own words).
reject_reason classify_problem(const std::string& problem);

/// Of several problems, the one that explains the others: does not run, shape, modifies an
/// input, NaN/Inf, nondeterministic, constant, near zero, input-independent (a reference that
/// writes to its input also differs between runs; a constant output also ignores its inputs).
reject_reason worst(const std::vector<reject_reason>& reasons);

struct screen_options {
  device dev = device::cpu();
  /// The shape sets to run the checks at, in order; the first failure stops.
  std::vector<shape_choice> shapes{std::nullopt};
  /// The output shapes expected at each of `shapes` (empty: not checked), so the shape rules are
  /// checked at the variants too (reference::run checks only the primary shapes).
  std::vector<std::vector<shape>> expected;
  /// Time the primary shapes and reject outside [min_ms, max_ms].
  bool time = false;
  double min_ms = 0.1;
  double max_ms = 20.0;
  int warmup = 2;
  int trials = 10;
  std::uint64_t seed = 1;
};

struct screen_result {
  std::optional<reject_reason> reason;  ///< empty: kept
  std::string detail;                   ///< the first problem, for --verbose
  double median_ms = -1.0;              ///< when timed
  bool ok() const { return !reason; }
};

/// Runs `t` as synthesis filters it: its output shapes at the primary shapes on meta tensors (no
/// arithmetic, so the CPU can check H200-sized shapes; skipped where an operator has no meta
/// kernel, as relu, abs, batch_norm, var and conv in LibTorch 1.13) must match the declared
/// ones; at each shape set of `o.shapes`, check_task_runs must find no problem (and the outputs
/// must have the `o.expected` shapes); with `o.time`, the median eager time at the primary shapes
/// must lie in the window.
screen_result screen(const task& t, const screen_options& o);

struct synth_options {
  int count = 100;
  std::uint64_t seed = 1;
  int max_ops = 5;
  /// Candidates to try before giving up (0: 50 x count).
  int max_tries = 0;
  device dev = device::cpu();
  /// The eager-time window (ms): measured on a GPU; on the CPU the estimate (cost_model) stands in.
  double min_ms = 0.1;
  double max_ms = 20.0;
  /// Timed trials per candidate on a GPU (a filter, not a baseline: `kforge tasks baseline`
  /// times properly).
  int trials = 10;
  /// Task files of a benchmark to keep out ("builtin": the built-in library).
  std::vector<std::string> exclude;
  /// Stop after this many seconds (0: no limit), still writing the table: a GPU run under a
  /// wall-clock limit keeps its counts.
  double max_seconds = 0.0;
  /// One line per candidate (its verdict) on the log stream.
  bool verbose = false;
};

struct synth_report {
  std::array<int, reject_reason_count> rejected{};
  int tried = 0;
  int kept = 0;
  double seconds = 0.0;
  device dev;
  std::size_t excluded_tasks = 0;  ///< tasks in the --exclude lists
  bool out_of_time = false;        ///< stopped by max_seconds
  bool timed() const { return dev.type == device::kind::cuda; }
};

/// Generates candidates from seeds mix(opt.seed, i), i = 0, 1, ..., until opt.count are kept,
/// opt.max_tries were tried or opt.max_seconds passed. Filters in order: duplicate signature,
/// contamination, estimated time (on the CPU the window itself; on a GPU 4x wider, only to skip
/// hopeless runs), then screen():
/// on a GPU at the primary shapes, both variants and a timing; on the CPU at the variants only
/// (primary shapes checked on meta tensors). Each kept task goes to `jsonl` as one line at once,
/// so a run cut short keeps what it found. For a seed and device kind the output is the same in
/// every run, except that on a GPU the measured-time filter can tip near the window's edges.
result<synth_report> synthesize(const synth_options& opt, std::ostream& jsonl, std::ostream& log);

/// The closing table: one row per rejection reason, then kept, tried and the time.
std::string format_report(const synth_report& r, const synth_options& opt);

}  // namespace kforge::tasks::synth

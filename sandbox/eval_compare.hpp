#pragma once
// `kforge compare BEFORE AFTER`: two `kforge eval` verdict files of the same tasks (a model before
// and after RL, or two models), compared by pass rate and mean speedup over
// the eager baseline per side, with the spread across tasks, and their differences with a paired
// bootstrap interval over tasks — so "higher" is a claim the data supports, or is said not to be.
//
// Per task the samples are averaged first (a task with 8 samples counts once), then over tasks:
//   pass rate     = correct samples / samples
//   mean speedup  = mean of (speedup if correct else 0): a failing kernel is worth nothing
// The interval resamples tasks with replacement (same tasks on both sides, paired) and takes the
// 2.5th and 97.5th percentiles of the mean difference.
// --best-of-task compares what each side found with its whole budget instead: a task passes when
// any of its samples is correct, at its best speedup (best_of_task). This is the measure for two
// ways of spending the same sandbox budget on a task, e.g. 24 single-shot samples against 8
// episodes of 3 turns (`kforge optimize --tasks` writes every turn's verdict in this format).
#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.hpp"

namespace kforge::sandbox {

/// One task's samples in a verdict file. An `infra_error` verdict is the sandbox's failure, not
/// the kernel's: it is counted apart and left out of `samples`.
struct task_samples {
  int samples = 0;
  int correct = 0;
  int infra_errors = 0;
  double speedup_sum = 0;               ///< over all samples, a failing one adding 0
  std::vector<double> correct_speedups;  ///< the correct samples' speedups (those with a timing)

  double pass_rate() const { return samples > 0 ? static_cast<double>(correct) / samples : 0.0; }
  double mean_speedup() const { return samples > 0 ? speedup_sum / samples : 0.0; }
};

/// Verdict lines by task id.
using eval_by_task = std::map<std::string, task_samples>;

/// Parses `kforge eval` verdict lines (each an object with "task" and "status"; "speedup" when
/// "ok"). `name` is used in errors, which name the line: NAME:LINE: what is wrong. A compile-only
/// eval's lines (status "compiled": nothing ran) are refused: they have no pass rate.
result<eval_by_task> parse_eval_verdicts(const std::string& text, const std::string& name);

/// Reads and parses a verdict file.
result<eval_by_task> read_eval_verdicts(const std::string& path);

/// Each task's samples as one: correct when any sample is, its speedup the best correct sample's
/// (a task whose samples were all infra_error keeps no sample).
eval_by_task best_of_task(const eval_by_task& e);

struct compare_options {
  std::string before, after;  ///< verdict files (kforge eval --out)
  std::string json;           ///< also write the comparison here; empty: none
  int resamples = 10'000;     ///< bootstrap resamples, >= 100
  std::uint64_t seed = 1;     ///< bootstrap seed: the same files and seed give the same interval
  bool best_of_task = false;  ///< compare best_of_task of each side
};

/// The comparison as JSON: "before" and "after" (per-side figures), "difference" (after - before
/// with its interval and a word: "higher", "lower" or "not shown different"), and the tasks whose
/// pass rate rose, fell or stayed. An error when the two files do not hold the same tasks, or hold
/// fewer than 2 (an interval over one task says nothing).
result<nlohmann::json> compare_evals(const eval_by_task& before, const eval_by_task& after,
                                     int resamples, std::uint64_t seed);

/// A table of compare_evals' result for a person.
std::string format_comparison(const nlohmann::json& c);

/// The command: prints the table; 0 when compared, 2 on bad input (named).
int compare_command(const compare_options& options, std::ostream& out, std::ostream& err);

}  // namespace kforge::sandbox

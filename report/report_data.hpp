#pragma once
// What `kforge report` reads from a run directory (head.hpp writes it), checked line by line: a
// malformed line is an error naming FILE:LINE; a file that is simply not there is recorded as
// absent, so the report can say "not available" for its sections.

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/result.hpp"
#include "report/verdict_tally.hpp"

namespace kforge::pipeline {

/// One line of metrics.jsonl: one stage instance's counters at time t (seconds since the start).
struct metrics_row {
  double t = 0;
  std::string process, stage, kind;
  std::uint64_t received = 0, sent = 0, dropped = 0, errors = 0, queue_depth = 0;
  std::map<std::string, std::uint64_t> extra;
};

/// One line of train.jsonl: its numeric fields by name (step, loss, kl, reward_mean, ...).
using train_row = std::map<std::string, double>;

/// RUN_DIR/best/STEM.json, with the path of its source file.
struct best_kernel_row {
  std::string task;
  double speedup = 0, candidate_ms = 0, baseline_ms = 0;
  std::uint64_t policy_version = 0;
  std::string audit;
  std::string json_path;
  std::string source_path;  ///< empty when the .cu named by the .json is missing
};

struct run_data {
  std::string dir;
  std::string name;                          ///< [run] name of manifest.toml, else the folder's
  std::optional<std::string> manifest_text;  ///< absent: no manifest.toml
  std::optional<nlohmann::json> summary;     ///< absent: no summary.json (the run did not end)
  std::optional<std::vector<metrics_row>> metrics;  ///< absent: no metrics.jsonl
  std::optional<std::vector<train_row>> train;      ///< absent: no train.jsonl (no real trainer)
  /// train.jsonl lines of earlier runs into this directory (it is appended to): the steps
  /// restarted after them, and only the last run's lines are in `train`.
  std::size_t train_earlier = 0;
  std::vector<best_kernel_row> best;  ///< sorted by task id
  std::optional<verdict_tally> verdicts;  ///< absent: no verdict recordings (recording off)
};

/// Reads run directory `dir`. An error when it is not a directory or a file in it is malformed.
result<run_data> load_run(const std::string& dir);

}  // namespace kforge::pipeline

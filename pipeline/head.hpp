#pragma once
// `kforge run` (the head) and `kforge worker` (any other process of a topology).
//
// The head writes the run directory (manifest snapshot, recordings, metrics.jsonl, logs,
// summary.json, and at the end report.html: report.hpp), spawns the manifest's other local processes as `kforge worker`, runs its own
// share of the stages, publishes heartbeats and control, collects every process's stage metrics,
// draws the progress line, and ends the run: when the trainer has published `steps` versions, on
// Ctrl-C, or when nothing moved for a while (stalled). It then drains in-flight work, shuts every
// process down and checks that counts in equal counts out along the pipeline.

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>

namespace kforge::pipeline {

struct run_command_options {
  std::optional<std::string> manifest;  ///< default: the embedded manifest
  std::optional<std::int64_t> steps;    ///< overrides run.steps
  std::optional<std::string> run_dir;   ///< overrides run.run_dir
  std::optional<bool> progress;         ///< overrides run.progress
  bool check_only = false;              ///< validate, print the plan and readiness, start nothing
};

/// Exit code: 0 when the run completed its steps with balanced counts, 1 when it stalled, failed
/// or the counts do not balance, 2 for a bad manifest or options, 130 when interrupted.
int run_command(const run_command_options& opt, std::ostream& out, std::ostream& err);

struct worker_command_options {
  std::string manifest;
  std::string process;
  std::optional<std::string> run_dir;  ///< default: the manifest's run.run_dir
  std::optional<std::int64_t> steps;   ///< the head's --steps override, passed on
};

/// Runs one non-head process until the head says shutdown or falls silent.
int worker_command(const worker_command_options& opt, std::ostream& err);

}  // namespace kforge::pipeline

#pragma once
// `kforge run` (the head) and `kforge worker` (any other process of a topology). The head's
// phases are head_run's (head_run.hpp); its run directory is run_directory.hpp's.
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
  std::optional<double> time_limit_s;   ///< overrides run.time_limit_s (also on --resume: per leg)
  bool check_only = false;              ///< validate, print the plan and readiness, start nothing
  /// "slurm": place the manifest on the Slurm allocation the run is in and start the processes
  /// on other nodes as job steps (runtime/slurm_launch.hpp). Unset: other nodes start by hand.
  std::optional<std::string> launcher;
  /// A run directory to continue: its manifest.toml snapshot, from its newest complete checkpoint
  /// (RUN_DIR/checkpoints/step-N), in the same directory. `steps` may raise the total; `manifest`
  /// and `run_dir` must be unset.
  std::optional<std::string> resume;
};

/// At the end, after the drain and before shutdown, the head asks the trainers for a checkpoint of
/// the last step (the `checkpoint` control command) and waits, bounded, until they report it; the
/// summary says which checkpoint the run ended with ("checkpoint"), or why none
/// ("checkpoint_note"); "resumed_from" is the step a --resume run started at (null otherwise).
///
/// Exit code: 0 when the run completed its steps (or reached run.time_limit_s) with balanced counts, 1 when it stalled, failed
/// or the counts do not balance, 2 for a bad manifest or options, 130 when interrupted.
int run_command(const run_command_options& opt, std::ostream& out, std::ostream& err);

struct worker_command_options {
  std::string manifest;
  std::string process;
  std::optional<std::string> run_dir;  ///< default: the manifest's run.run_dir
  std::optional<std::int64_t> steps;   ///< the head's --steps override, passed on
  /// Both set: a resumed run's point (process_runtime's resume_point), passed on by the head.
  std::optional<std::uint64_t> resume_step;
  std::optional<std::string> resume_checkpoint;
};

/// Runs one non-head process until the head says shutdown or falls silent.
int worker_command(const worker_command_options& opt, std::ostream& err);

}  // namespace kforge::pipeline

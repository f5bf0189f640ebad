#pragma once
// The run directory of `kforge run`: made (or continued) before any process starts. It holds the
// manifest snapshot every process of the run reads; a resumed run (`--resume RUN_DIR`) reads the
// snapshot back, with the first run's command-line overrides, and continues from the newest
// complete checkpoint, keeping the earlier leg's recordings and summary beside its own.

#include <cstdint>
#include <optional>
#include <string>

#include "common/result.hpp"
#include "config/manifest.hpp"
#include "runtime/process_runtime.hpp"

namespace kforge::pipeline {

/// A run to continue: RUN_DIR's manifest snapshot with the first run's overrides applied again,
/// run.run_dir = RUN_DIR, and its newest complete checkpoint. `steps` (--steps) may raise the
/// total. An error names what stops the resume, before anything of the directory is moved.
struct resumed_run {
  manifest m;
  resume_point at;
};
result<resumed_run> open_resumed_run(const std::string& run_dir, std::optional<std::int64_t> steps);

/// Makes m.run.run_dir (with recordings/ and logs/) and writes the manifest snapshot there first,
/// with a line recording steps and run_dir when `overridden` (command-line overrides, or a
/// resume). A resumed leg then moves the last leg's recordings, summary and infra_error log aside
/// ("*-before-step-N"); a fresh run removes an earlier run's infra_error log. Returns the
/// snapshot's path.
result<std::string> prepare_run_directory(const manifest& m, bool overridden,
                                          const std::optional<resume_point>& resume);

}  // namespace kforge::pipeline

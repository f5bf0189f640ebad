#pragma once
// `kforge report RUN_DIR [--out FILE]`: one self-contained HTML page about a run — header and
// balance checks (summary.json), charts over time and training step drawn as inline SVG
// (metrics.jsonl, train.jsonl), verdict and speedup tables (the reward's counters), the recorded
// verdicts per level and category as kforge eval counts them (verdict_tally.hpp) and the best
// kernel per task (best/). No scripts, no network: it opens anywhere, and can be mailed.
// `kforge run` writes RUN_DIR/report.html itself when a run ends.

#include <iosfwd>
#include <optional>
#include <string>

#include "common/result.hpp"

namespace kforge::pipeline {

struct report_options {
  std::string run_dir;
  std::optional<std::string> out;  ///< default: RUN_DIR/report.html
};

/// The report of `run_dir` as an HTML document; links to the best kernels' sources are relative
/// to `out_dir`, where the page will be. An error naming FILE:LINE for a malformed input; a
/// missing input only makes its section say "not available".
result<std::string> render_report(const std::string& run_dir, const std::string& out_dir);

/// Renders the report and writes it to `out` (default RUN_DIR/report.html) through a temporary
/// file and a rename; returns the path written.
result<std::string> write_report(const std::string& run_dir,
                                 const std::optional<std::string>& out = std::nullopt);

/// The subcommand: 0 when the report was written (its path on `out`), 1 otherwise.
int report_command(const report_options& opt, std::ostream& out, std::ostream& err);

}  // namespace kforge::pipeline

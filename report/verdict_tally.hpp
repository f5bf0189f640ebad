#pragma once
// The run's verdicts as KernelBench and CUDA Agent count them, for `kforge report`: every verdict
// recorded on the "verdicts" link (RUN_DIR/recordings*/verdicts@*.kfrec, the earlier legs' of a
// resumed run too) made a line like `kforge eval`'s ({task, category, status, speedup}) and
// summarized by the same code, so a run's per-level and per-category table means what eval's does.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/result.hpp"

namespace kforge::pipeline {

struct verdict_tally {
  std::vector<std::string> files;   ///< the recordings read
  std::vector<nlohmann::json> lines;
  /// Files that end in a torn record (a writer that died): their whole records are counted, and
  /// this says which and where.
  std::vector<std::string> torn;
};

/// The verdict recordings of `run_dir`; std::nullopt when it has none (recording off). An error
/// names a file that is not a recording or was written under another schema.
result<std::optional<verdict_tally>> read_verdict_tally(const std::string& run_dir);

}  // namespace kforge::pipeline

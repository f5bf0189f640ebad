#pragma once
// A verdict as one JSON object (kforge eval's output lines, reports): every field the agent or a
// person reads, with the speedup worked out. And back, for summaries over a verdict file.
#include <string>

#include <nlohmann/json.hpp>

#include "common/result.hpp"
#include "messages/rollout_generated.h"

namespace kforge::sandbox {

/// {"status", "reason", "speedup", "candidate_ms", "baseline_ms", ...}; the candidate's task id,
/// source and completion are left to the caller.
nlohmann::json verdict_json(const wire::VerdictT& v);

/// baseline median / candidate median for an ok verdict with both timings, else 0.
double speedup_of(const wire::VerdictT& v);

/// A verdict line back as a verdict: status, reason, errors, timings, counts, diagnostics,
/// resources and profile (what an observation renders; the candidate is left empty). An error
/// names a missing or unknown "status", or a field of the wrong type.
result<wire::VerdictT> verdict_from_json(const nlohmann::json& j);

}  // namespace kforge::sandbox

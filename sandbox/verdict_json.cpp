#include "sandbox/verdict_json.hpp"

namespace kforge::sandbox {

double speedup_of(const wire::VerdictT& v) {
  if (v.status != wire::VerdictStatus::ok || !v.candidate_timing || !v.baseline_timing) return 0;
  if (v.candidate_timing->median_ms <= 0) return 0;
  return v.baseline_timing->median_ms / v.candidate_timing->median_ms;
}

nlohmann::json verdict_json(const wire::VerdictT& v) {
  using json = nlohmann::json;
  json j{{"status", wire::EnumNameVerdictStatus(v.status)}, {"reason", v.reason}};
  if (v.status == wire::VerdictStatus::wrong_answer) {
    j["max_abs_error"] = v.max_abs_error;
    j["max_rel_error"] = v.max_rel_error;
    j["first_bad_index"] = v.first_bad_index;
  }
  if (v.candidate_timing) {
    j["candidate_ms"] = v.candidate_timing->median_ms;
    j["candidate_iqr_ms"] = v.candidate_timing->iqr_ms;
    j["trials"] = v.candidate_timing->trials;
  }
  if (v.baseline_timing) {
    j["baseline_ms"] = v.baseline_timing->median_ms;
    j["baseline_iqr_ms"] = v.baseline_timing->iqr_ms;
  }
  if (const double s = speedup_of(v); s > 0) j["speedup"] = s;
  j["checks"] = v.checks;
  j["compile_ms"] = v.compile_ms;
  j["verify_ms"] = v.verify_ms;
  j["time_ms"] = v.time_ms;
  if (v.profile) {
    json stalls = json::array();
    for (const auto& st : v.profile->stalls)
      if (st) stalls.push_back({{"reason", st->reason}, {"share_pct", st->share_pct}});
    j["profile"] = {{"kernel", v.profile->kernel},
                    {"duration_us", v.profile->duration_us},
                    {"achieved_occupancy_pct", v.profile->achieved_occupancy_pct},
                    {"dram_throughput_pct", v.profile->dram_throughput_pct},
                    {"sm_throughput_pct", v.profile->sm_throughput_pct},
                    {"stalls", stalls}};
  }
  if (!v.profile_skipped.empty()) j["profile_skipped"] = v.profile_skipped;
  if (v.profile_ms > 0) j["profile_ms"] = v.profile_ms;
  if (!v.audit.empty()) j["audit"] = v.audit;
  if (v.reused) j["reused"] = true;
  if (!v.output.empty()) j["output"] = v.output;
  json diags = json::array();
  for (const auto& d : v.diagnostics)
    if (d)
      diags.push_back({{"line", d->line},
                       {"severity", wire::EnumNameSeverity(d->severity)},
                       {"code", d->code},
                       {"message", d->message}});
  if (!diags.empty()) j["diagnostics"] = diags;
  json res = json::array();
  for (const auto& r : v.resources)
    if (r)
      res.push_back({{"kernel", r->kernel},
                     {"registers", r->registers},
                     {"shared_bytes", r->shared_bytes},
                     {"spill_store_bytes", r->spill_store_bytes},
                     {"spill_load_bytes", r->spill_load_bytes}});
  if (!res.empty()) j["resources"] = res;
  return j;
}

}  // namespace kforge::sandbox

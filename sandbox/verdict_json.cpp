#include "sandbox/verdict_json.hpp"

#include <memory>
#include <optional>

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

namespace {

template <class E>
std::optional<E> enum_named(const std::string& name, const char* const* names, int count) {
  for (int i = 0; i < count && names[i]; ++i)
    if (name == names[i]) return static_cast<E>(i);
  return std::nullopt;
}

std::unique_ptr<wire::TimingT> timing(const nlohmann::json& j, const char* median, const char* iqr) {
  if (!j.contains(median)) return nullptr;
  auto t = std::make_unique<wire::TimingT>();
  t->median_ms = j.at(median).get<double>();
  t->iqr_ms = j.value(iqr, 0.0);
  t->trials = j.value("trials", 0u);
  return t;
}

}  // namespace

result<wire::VerdictT> verdict_from_json(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("status") || !j["status"].is_string())
    return error{"a verdict line needs a \"status\" string"};
  const auto status = enum_named<wire::VerdictStatus>(j["status"].get<std::string>(), wire::EnumNamesVerdictStatus(),
                                                      static_cast<int>(wire::VerdictStatus::MAX) + 1);
  if (!status) return error{"unknown verdict status \"" + j["status"].get<std::string>() + "\""};
  wire::VerdictT v;
  v.status = *status;
  try {
    v.reason = j.value("reason", "");
    v.max_abs_error = j.value("max_abs_error", 0.0);
    v.max_rel_error = j.value("max_rel_error", 0.0);
    v.first_bad_index = j.value("first_bad_index", std::int64_t{-1});
    v.candidate_timing = timing(j, "candidate_ms", "candidate_iqr_ms");
    v.baseline_timing = timing(j, "baseline_ms", "baseline_iqr_ms");
    v.checks = j.value("checks", 0u);
    v.compile_ms = j.value("compile_ms", 0.0);
    v.verify_ms = j.value("verify_ms", 0.0);
    v.time_ms = j.value("time_ms", 0.0);
    v.output = j.value("output", "");
    for (const auto& d : j.value("diagnostics", nlohmann::json::array())) {
      auto x = std::make_unique<wire::DiagnosticT>();
      x->line = d.value("line", 0);
      x->code = d.value("code", "");
      x->message = d.value("message", "");
      x->severity = enum_named<wire::Severity>(d.value("severity", "error"), wire::EnumNamesSeverity(),
                                               static_cast<int>(wire::Severity::MAX) + 1)
                        .value_or(wire::Severity::error);
      v.diagnostics.push_back(std::move(x));
    }
    for (const auto& r : j.value("resources", nlohmann::json::array())) {
      auto x = std::make_unique<wire::ResourceUsageT>();
      x->kernel = r.value("kernel", "");
      x->registers = r.value("registers", 0);
      x->shared_bytes = r.value("shared_bytes", 0);
      x->spill_store_bytes = r.value("spill_store_bytes", 0);
      x->spill_load_bytes = r.value("spill_load_bytes", 0);
      v.resources.push_back(std::move(x));
    }
  } catch (const nlohmann::json::exception& e) {
    return error{std::string("a verdict line's field has the wrong type: ") + e.what()};
  }
  return v;
}

}  // namespace kforge::sandbox

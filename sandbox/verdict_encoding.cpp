#include "sandbox/verdict_encoding.hpp"

#include <memory>

namespace kforge::sandbox {

wire::VerdictStatus to_wire(compile_status s) noexcept {
  switch (s) {
    case compile_status::ok:
      return wire::VerdictStatus::ok;
    case compile_status::compile_error:
      return wire::VerdictStatus::compile_error;
    case compile_status::link_error:
      return wire::VerdictStatus::link_error;
    case compile_status::rejected:
      return wire::VerdictStatus::rejected;
    case compile_status::timeout:
      return wire::VerdictStatus::timeout;
    case compile_status::infra_error:
      return wire::VerdictStatus::infra_error;
  }
  return wire::VerdictStatus::infra_error;
}

wire::VerdictStatus to_wire(static_status s) noexcept {
  switch (s) {
    case static_status::ok:
      return wire::VerdictStatus::ok;
    case static_status::rejected:
      return wire::VerdictStatus::rejected;
    case static_status::link_error:
      return wire::VerdictStatus::link_error;
    case static_status::compile_error:
      return wire::VerdictStatus::compile_error;
    case static_status::infra_error:
      return wire::VerdictStatus::infra_error;
  }
  return wire::VerdictStatus::infra_error;
}

wire::Severity to_wire(severity s) noexcept {
  switch (s) {
    case severity::error:
      return wire::Severity::error;
    case severity::warning:
      return wire::Severity::warning;
    case severity::note:
      return wire::Severity::note;
  }
  return wire::Severity::error;
}

void encode_compile(const compile_result& r, wire::VerdictT& v) {
  v.status = to_wire(r.status);
  v.reason = r.reason;
  v.diagnostics.clear();
  for (const auto& d : r.diagnostics) {
    auto w = std::make_unique<wire::DiagnosticT>();
    w->line = d.line;
    w->column = d.column;
    w->severity = to_wire(d.level);
    w->code = d.code;
    w->message = d.message;
    v.diagnostics.push_back(std::move(w));
  }
  v.resources.clear();
  for (const auto& u : r.resources) {
    auto w = std::make_unique<wire::ResourceUsageT>();
    w->kernel = u.kernel;
    w->registers = u.registers;
    w->shared_bytes = u.shared_bytes;
    w->spill_store_bytes = u.spill_store_bytes;
    w->spill_load_bytes = u.spill_load_bytes;
    v.resources.push_back(std::move(w));
  }
  v.compile_ms = r.elapsed_ms;
}

void encode_static(const static_verdict& s, wire::VerdictT& v) {
  v.status = to_wire(s.status);
  if (s.ok()) return;
  v.reason = s.reason;
  v.diagnostics.clear();
  for (const auto& f : s.findings) {
    auto w = std::make_unique<wire::DiagnosticT>();
    w->line = f.line;
    w->severity = wire::Severity::error;
    w->code = std::string(rule_name(f.why));
    w->message = f.what + " (" + std::string(rule_summary(f.why)) + ")";
    v.diagnostics.push_back(std::move(w));
  }
}

namespace {
std::unique_ptr<wire::TimingT> to_wire(const trial_stats& s) {
  auto t = std::make_unique<wire::TimingT>();
  t->median_ms = s.median_ms;
  t->iqr_ms = s.iqr_ms();
  t->trials = static_cast<std::uint32_t>(s.trials);
  return t;
}
}  // namespace

std::unique_ptr<wire::KernelProfileT> to_wire(const kernel_profile& p) {
  auto w = std::make_unique<wire::KernelProfileT>();
  w->kernel = p.kernel;
  w->duration_us = p.duration_us;
  w->achieved_occupancy_pct = p.achieved_occupancy_pct;
  w->dram_throughput_pct = p.dram_throughput_pct;
  w->sm_throughput_pct = p.sm_throughput_pct;
  for (const auto& [reason, share] : p.stalls) {
    auto s = std::make_unique<wire::WarpStallT>();
    s->reason = reason;
    s->share_pct = share;
    w->stalls.push_back(std::move(s));
  }
  return w;
}

std::optional<kernel_profile> profile_of(const wire::VerdictT& v) {
  if (!v.profile) return std::nullopt;
  kernel_profile p;
  p.kernel = v.profile->kernel;
  p.duration_us = v.profile->duration_us;
  p.achieved_occupancy_pct = v.profile->achieved_occupancy_pct;
  p.dram_throughput_pct = v.profile->dram_throughput_pct;
  p.sm_throughput_pct = v.profile->sm_throughput_pct;
  for (const auto& s : v.profile->stalls)
    if (s) p.stalls.emplace_back(s->reason, s->share_pct);
  return p;
}

void encode_run(const run_outcome& r, wire::VerdictT& v) {
  v.status = r.status;
  v.reason = r.reason;
  v.max_abs_error = r.max_abs_error;
  v.max_rel_error = r.max_rel_error;
  v.first_bad_index = r.first_bad_index;
  v.checks = static_cast<std::uint32_t>(r.checks);
  if (r.candidate.trials > 0) v.candidate_timing = to_wire(r.candidate);
  if (r.baseline.trials > 0) v.baseline_timing = to_wire(r.baseline);
  v.audit = r.audit;
  v.output = r.output;
  v.verify_ms = r.verify_ms;
  v.time_ms = r.time_ms;
  if (r.profile) v.profile = to_wire(*r.profile);
  v.profile_skipped = r.profile_skipped;
  v.profile_ms = r.profile_ms;
}

}  // namespace kforge::sandbox

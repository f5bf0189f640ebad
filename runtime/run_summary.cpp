// head_run's last phase: summary.json, the console table and the report.

#include <filesystem>
#include <iomanip>
#include <ostream>

#include "common/file_writer.hpp"
#include "common/visible_gpus.hpp"
#include "report/report.hpp"
#include "runtime/head_run.hpp"
#include "sandbox/child_setup.hpp"
#include "stages/infra_error_log.hpp"
#include "stages/stage_factory.hpp"

namespace kforge::pipeline {

namespace fs = std::filesystem;

std::vector<gpu_group_use> head_run::gpu_groups() const {
  // GPUs as this host resolves the groups (what the local stages got); an unresolvable manifest
  // would not have started, but keeps its explicit lists if it did.
  auto resolved = resolve_gpu_groups(m_, visible_gpu_count());
  return gpu_groups_use(m_, resolved ? *resolved : std::map<std::string, std::vector<int>>{}, board_, loop_s_);
}

nlohmann::json head_run::summary_json(bool balanced, const nlohmann::json& checks, std::uint64_t unjudged,
                                      const std::vector<gpu_group_use>& groups) const {
  nlohmann::json stages = nlohmann::json::array();
  for (const auto& [k, s] : board_.latest) stages.push_back(to_json(s));
  nlohmann::json procs = nlohmann::json::array();
  for (const auto& c : children_) procs.push_back({{"name", c.name}, {"pid", c.pid}, {"exit", c.exit}});
  const double elapsed = std::chrono::duration<double>(clock_type::now() - started_).count();
  nlohmann::json js_groups = nlohmann::json::array();
  for (const auto& g : groups) js_groups.push_back(to_json(g));
  nlohmann::json summary = {{"outcome", outcome_},   {"steps", m_.run.steps},
                            {"versions", version_},  {"elapsed_s", elapsed},
                            {"balanced", balanced},  {"checks", checks},
                            {"stages", stages},      {"processes", procs},
                            {"stand_ins", stand_ins_},
                            {"mode", m_.run.mode == run_mode::sync ? "sync" : "async"},
                            {"loop_s", loop_s_},     {"gpu_groups", js_groups},
                            {"checkpoint", checkpoint_},
                            {"stopped_by", stopped_by_.empty() ? nlohmann::json() : nlohmann::json(stopped_by_)},
                            {"time_limit_s", m_.run.time_limit_s},
                            {"unjudged_at_stop", unjudged},
                            {"refill_steps", refills_.sent()},
                            {"sandbox_time_per_candidate", to_json(sandbox_time_of(board_))},
                            {"resumed_from", resume_ ? nlohmann::json(resume_->step) : nlohmann::json()}};
  if (checkpoint_.is_null()) summary["checkpoint_note"] = checkpoint_note_;
  // What this host grants the sandbox's candidate children (the banner said it too).
  if (m_.sandbox.backend == sandbox_backend::nvcc && visible_gpu_count() > 0)
    summary["sandbox_candidate_children"] = sandbox::describe_candidate_confinement(m_.sandbox.confine);
  // Per published version over the loop's window (not elapsed_s, whose start-up and shutdown are
  // fixed costs that would blur a sync/async comparison); null before the first version.
  // A resumed run counts the versions of this leg only, its loop being this leg's.
  const std::uint64_t legs = leg_versions();
  summary["seconds_per_step"] = legs > 0 ? nlohmann::json(loop_s_ / static_cast<double>(legs))
                                   : nlohmann::json();
  return summary;
}

void head_run::print_table(const std::vector<balance_check>& checks, std::uint64_t unjudged,
                           const std::vector<gpu_group_use>& groups) const {
  out_ << std::left << std::setw(26) << "stage" << std::right << std::setw(10) << "received"
       << std::setw(10) << "sent" << std::setw(9) << "dropped" << std::setw(8) << "errors"
       << std::setw(8) << "queued" << std::setw(11) << "p50 us" << "\n";
  for (const auto& [k, s] : board_.latest) {
    if (s.kind == "bus" && s.errors == 0) continue;
    out_ << std::left << std::setw(26) << k << std::right << std::setw(10) << s.received
         << std::setw(10) << s.sent << std::setw(9) << s.dropped << std::setw(8) << s.errors
         << std::setw(8) << s.queue_depth << std::setw(11) << std::setprecision(0)
         << s.latency_p50_us << "\n";
  }
  if (checkpoint_.is_string())
    out_ << "checkpoint: " << (fs::path(dir_) / checkpoint_.get<std::string>()).string()
         << " (continue with kforge run --resume " << dir_ << ")\n";
  if (const std::uint64_t legs = leg_versions(); legs > 0)
    out_ << std::setprecision(2) << "seconds per step: " << loop_s_ / static_cast<double>(legs)
         << " (" << legs << " versions in a " << std::setprecision(1) << loop_s_
         << " s loop, start-up and shutdown left out)\n";
  if (!groups.empty()) {
    out_ << "GPU groups (busy = time inside logic calls over the loop; see README):\n";
    for (const auto& g : groups) {
      std::string gpus;
      for (int i : g.gpus) gpus += (gpus.empty() ? "" : ",") + std::to_string(i);
      out_ << "  " << std::left << std::setw(12) << g.name << std::right << std::setw(10)
           << ("[" + gpus + "]") << "  idle " << std::setw(3) << std::setprecision(0)
           << 100 * g.idle_fraction << "%  busy " << std::setprecision(1) << g.busy_s << " s:";
      for (const auto& st : g.stages)
        out_ << " " << st.stage << " " << std::setprecision(0)
             << (g.elapsed_s > 0 ? 100 * std::min(1.0, st.busy_s / g.elapsed_s) : 0.0) << "%";
      out_ << "\n";
    }
  }
  if (const auto line = describe(sandbox_time_of(board_)); !line.empty()) out_ << line << "\n";
  out_ << "counts in = counts out:\n";
  for (const auto& c : checks)
    out_ << "  " << (c.ok() ? "ok  " : "FAIL") << " " << c.what << " (" << c.left << " vs "
         << c.right << ")\n";
  if (refills_.sent() > 0)
    out_ << "refill steps: " << refills_.sent() << " (the buffer dropped "
         << board_.sum("buffer", &wire::StageMetricsT::dropped)
         << " samples; its dropped_* counters in summary.json say why)\n";
  if (const auto infra = board_.extra("reward", "status_infra_error"); infra > 0)
    out_ << infra << " verdict(s) were infra_error, the sandbox's fault, and left unscored; why: "
         << infra_error_log::path_in(dir_) << "\n";
  if (unjudged > 0)
    out_ << "  " << unjudged << " candidate(s) were left unjudged in the sandbox pool at the stop (the "
         << "sandbox was behind the sampler)\n";
}

int head_run::summarize() {
  // The outcome, the final counts and whether they balance.
  const auto checks = balance(board_);
  const auto unjudged = unjudged_at_stop(board_);  // counted in the checks; said on its own too
  bool balanced = true;
  nlohmann::json js_checks = nlohmann::json::array();
  for (const auto& c : checks) {
    balanced = balanced && c.ok();
    js_checks.push_back({{"check", c.what}, {"left", c.left}, {"right", c.right}, {"ok", c.ok()}});
  }
  const auto groups = gpu_groups();
  const auto summary = summary_json(balanced, js_checks, unjudged, groups);
  if (auto s = write_file_atomically((fs::path(dir_) / "summary.json").string(), summary.dump(2) + "\n");
      !s) {
    err_ << "kforge run: " << s.message() << "\n";
    if (code_ == 0) {
      outcome_ = "failed: " + s.message();
      code_ = 1;
    }
  }
  out_ << "\nkforge run: " << outcome_;
  if (stopped_by_ == "time_limit_s")
    out_ << " (time limit of " << m_.run.time_limit_s << " s reached at step " << version_ << " of "
         << m_.run.steps << ")";
  out_ << " after " << std::fixed << std::setprecision(1) << summary["elapsed_s"].get<double>()
       << " s; " << version_ << " policy versions; run directory " << dir_ << "\n";
  print_table(checks, unjudged, groups);
  if (!head_error_.empty()) err_ << "kforge run: head: " << head_error_ << "\n";
  if (!write_failed_) err_ << "kforge run: " << write_failed_.message() << "\n";
  // The report reads what was just written (summary.json last). It is a view of the run, not part
  // of it: a failure here is said but leaves the exit code to the run itself.
  if (auto report = write_report(dir_); report)
    out_ << "report: " << *report << "\n";
  else
    err_ << "kforge run: report not written: " << report.message() << "\n";
  if (code_ == 0 && !balanced) code_ = 1;
  return code_;
}

}  // namespace kforge::pipeline

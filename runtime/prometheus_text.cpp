#include "runtime/prometheus_text.hpp"

#include <cstdio>
#include <sstream>

#include "stages/reward.hpp"

namespace kforge::pipeline {

namespace {

// A label value with \, " and newlines escaped, as the format asks.
std::string escaped(const std::string& v) {
  std::string out;
  for (const char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

// The extra counters that are levels, not running totals (process_runtime.cpp's sandbox pool row,
// the trainer actor's checkpoint_step): a scraper's rate() must not read their drops as resets.
bool is_gauge(const std::string& name) {
  return name == "queued" || name == "in_flight" || name == "workers_alive" || name == "checkpoint_step";
}

std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// Samples of one metric family, written under one HELP and TYPE header.
class family {
 public:
  family(std::string name, std::string type, std::string help)
      : name_(std::move(name)), type_(std::move(type)), help_(std::move(help)) {}
  void add(const std::string& labels, double value) {
    lines_ << name_ << (labels.empty() ? "" : "{" + labels + "}") << ' ' << number(value) << '\n';
    any_ = true;
  }
  void write(std::ostringstream& out) const {
    if (!any_) return;
    out << "# HELP " << name_ << ' ' << help_ << "\n# TYPE " << name_ << ' ' << type_ << '\n' << lines_.str();
  }

 private:
  std::string name_, type_, help_;
  std::ostringstream lines_;
  bool any_ = false;
};

}  // namespace

std::string prometheus_text(const metrics_board& b, const run_gauges& g) {
  family received("kforge_stage_received_total", "counter", "Messages a stage instance took in.");
  family sent("kforge_stage_sent_total", "counter", "Messages a stage instance sent on.");
  family dropped("kforge_stage_dropped_total", "counter", "Messages a stage instance dropped on purpose.");
  family errors("kforge_stage_errors_total", "counter", "Errors a stage instance counted.");
  family queued("kforge_stage_queue_depth", "gauge", "Messages waiting at a stage instance.");
  family p50("kforge_stage_latency_p50_seconds", "gauge", "Median time of a stage instance's logic call.");
  family p99("kforge_stage_latency_p99_seconds", "gauge", "99th percentile time of a stage instance's logic call.");
  family extra("kforge_stage_counter_total", "counter",
               "A stage instance's own counters: verdicts by status, busy microseconds, drops by reason, ...");
  family value("kforge_stage_value", "gauge",
               "A stage instance's own values that go up and down: the sandbox pool's queue and live workers, "
               "the trainer's last checkpoint step.");
  for (const auto& [key, m] : b.latest) {
    const std::string labels = "stage=\"" + escaped(m.stage) + "\",kind=\"" + escaped(m.kind) +
                               "\",process=\"" + escaped(m.process) + "\"";
    received.add(labels, static_cast<double>(m.received));
    sent.add(labels, static_cast<double>(m.sent));
    dropped.add(labels, static_cast<double>(m.dropped));
    errors.add(labels, static_cast<double>(m.errors));
    queued.add(labels, static_cast<double>(m.queue_depth));
    p50.add(labels, m.latency_p50_us / 1e6);
    p99.add(labels, m.latency_p99_us / 1e6);
    for (const auto& c : m.extra)
      (is_gauge(c->name) ? value : extra).add(labels + ",name=\"" + escaped(c->name) + "\"", static_cast<double>(c->value));
  }

  using M = wire::StageMetricsT;
  const auto verdicts = b.sum("reward", &M::received);
  family version("kforge_policy_version", "gauge", "The newest policy version the trainer published.");
  family steps("kforge_run_steps", "gauge", "The training steps the run is to take.");
  family elapsed("kforge_run_elapsed_seconds", "gauge", "Seconds since the run started.");
  family pass("kforge_verdict_pass_rate", "gauge", "Fraction of the verdicts so far that were correct (ok).");
  family reward("kforge_reward_mean", "gauge", "Mean reward of the verdicts scored so far.");
  family busy("kforge_gpu_group_busy_fraction", "gauge",
              "Time inside the GPU stages' logic calls over the run, per GPU group (1 - idle fraction).");
  version.add("", static_cast<double>(g.policy_version));
  steps.add("", static_cast<double>(g.steps));
  elapsed.add("", g.elapsed_s);
  if (verdicts > 0) {
    const double n = static_cast<double>(verdicts);
    pass.add("", static_cast<double>(b.extra("reward", "status_ok")) / n);
    reward.add("", static_cast<double>(b.extra("reward", reward_sum_counter)) / 1e6 / n);
  }
  for (const auto& u : g.gpu_groups) busy.add("group=\"" + escaped(u.name) + "\"", 1.0 - u.idle_fraction);

  std::ostringstream out;
  for (const family* f : {&received, &sent, &dropped, &errors, &queued, &p50, &p99, &extra, &value, &version, &steps,
                          &elapsed, &pass, &reward, &busy})
    f->write(out);
  return out.str();
}

}  // namespace kforge::pipeline

#include "runtime/run_metrics.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iomanip>
#include <sstream>

#include "actors/stage_metrics.hpp"
#include "stages/reward.hpp"

namespace kforge::pipeline {

using namespace std::chrono_literals;

nlohmann::json to_json(const wire::StageMetricsT& m) {
  nlohmann::json extra = nlohmann::json::object();
  for (const auto& c : m.extra) extra[c->name] = c->value;
  return {{"process", m.process}, {"stage", m.stage},       {"kind", m.kind},
          {"received", m.received}, {"sent", m.sent},     {"dropped", m.dropped},
          {"errors", m.errors},    {"queue_depth", m.queue_depth}, {"logic_calls", m.logic_calls},
          {"latency_p50_us", m.latency_p50_us}, {"latency_p99_us", m.latency_p99_us},
          {"extra", extra},        {"last_error", m.last_error}};
}

std::uint64_t metrics_board::sum(const std::string& kind,
                                 std::uint64_t wire::StageMetricsT::*field) const {
  std::uint64_t n = 0;
  for (const auto& [k, m] : latest)
    if (m.kind == kind) n += m.*field;
  return n;
}

std::uint64_t metrics_board::extra(const std::string& kind, const std::string& name) const {
  std::uint64_t n = 0;
  for (const auto& [k, m] : latest)
    if (m.kind == kind)
      for (const auto& c : m.extra)
        if (c->name == name) n += c->value;
  return n;
}

sandbox_time sandbox_time_of(const metrics_board& b) {
  // Workers of a broker pool report as sandbox_worker; a sandbox judging inside its actor as
  // sandbox_pool (the broker's own sandbox_pool row has none of these counters).
  const auto us = [&](const char* name) {
    return static_cast<double>(b.extra("sandbox_worker", name) + b.extra("sandbox_pool", name)) / 1e6;
  };
  sandbox_time t;
  t.compile_s = us("compile_us");
  t.gpu_wait_s = us("gpu_wait_us");
  t.verify_s = us("prepare_us") + us("load_us") + us("check_us") + us("compare_us");
  t.timing_s = us("trials_us") + us("baseline_us") + us("confirm_us");
  t.other_s = us("start_us") + us("unload_us");
  t.profile_s = us("profile_us");
  if (t.compile_s + t.gpu_wait_s + t.verify_s + t.timing_s + t.other_s + t.profile_s <= 0) return {};
  t.judged = b.sum("sandbox_worker", &wire::StageMetricsT::logic_calls) +
             b.sum("sandbox_pool", &wire::StageMetricsT::logic_calls);
  const auto count = [&](const char* name) {
    return b.extra("sandbox_worker", name) + b.extra("sandbox_pool", name);
  };
  t.reused = count("reused_verdicts");
  t.reused_earlier = count("reused_earlier_verdicts");
  if (t.judged == 0) return {};
  const double n = static_cast<double>(t.judged);
  for (double* x : {&t.compile_s, &t.gpu_wait_s, &t.verify_s, &t.timing_s, &t.other_s, &t.profile_s}) *x /= n;
  return t;
}

nlohmann::json to_json(const sandbox_time& t) {
  return {{"judged", t.judged},       {"compile_s", t.compile_s}, {"gpu_wait_s", t.gpu_wait_s},
          {"verify_s", t.verify_s},   {"timing_s", t.timing_s},   {"other_s", t.other_s},
          {"profile_s", t.profile_s}, {"reused", t.reused},       {"reused_earlier", t.reused_earlier}};
}

std::string describe(const sandbox_time& t) {
  if (t.judged == 0) return "";
  char line[256];
  std::snprintf(line, sizeof line,
                "sandbox per judged candidate (%llu): nvcc %.2f s, waiting for the GPU %.2f s, "
                "verifying %.2f s, timing %.2f s, other %.2f s",
                static_cast<unsigned long long>(t.judged), t.compile_s, t.gpu_wait_s, t.verify_s,
                t.timing_s, t.other_s);
  std::string s = line;
  if (t.profile_s > 0) {
    std::snprintf(line, sizeof line, ", profiling %.2f s", t.profile_s);
    s += line;
  }
  if (t.reused > 0)
    s += "; " + std::to_string(t.reused) + " of them repeated a kernel of their group (verdict reused)";
  if (t.reused_earlier > 0)
    s += "; " + std::to_string(t.reused_earlier) +
         " repeated a kernel judged for their prompt in an earlier group (verdict reused)";
  return s;
}

bool metrics_board::starting() const {
  for (const auto& [k, m] : latest)
    for (const auto& c : m.extra)
      if (c && c->name == actors::starting_gauge && c->value > 0 && gone.count(m.process) == 0) return true;
  return false;
}

std::uint64_t metrics_board::activity() const {
  std::uint64_t n = 0;
  for (const auto& [k, m] : latest)
    if (m.kind != "bus") n += m.received + m.sent + m.dropped + m.errors;
  return n;
}

void metrics_board::heard(const std::string& process, std::chrono::steady_clock::time_point at) {
  last_heard[process] = at;
}

std::uint64_t metrics_board::queued(bool count_buffer,
                                    std::chrono::steady_clock::time_point now) const {
  auto silent = [&](const std::string& process) {
    const auto it = last_heard.find(process);
    return it != last_heard.end() && now - it->second > silent_after;
  };
  std::uint64_t n = 0;
  for (const auto& [k, m] : latest)
    if ((count_buffer || m.kind != "buffer") && !gone.count(m.process) && !silent(m.process))
      n += m.queue_depth;
  return n;
}

namespace {
std::uint64_t fatal_errors_of(const wire::StageMetricsT& m) {
  for (const auto& c : m.extra)
    if (c->name == actors::fatal_counter) return c->value;
  return 0;
}
}  // namespace

std::uint64_t metrics_board::fatal_errors() const {
  std::uint64_t n = 0;
  for (const auto& [k, m] : latest) n += fatal_errors_of(m);
  return n;
}

std::string metrics_board::failure() const {
  for (const auto& [k, m] : latest)
    if (fatal_errors_of(m) > 0) return m.last_error;
  return "";
}

std::uint64_t unjudged_at_stop(const metrics_board& b) {
  return b.extra("sandbox_pool", "queued") + b.extra("sandbox_pool", "in_flight");
}

bool loop_ran_dry(const metrics_board& b, std::uint64_t released_groups,
                  std::uint64_t dropped_before) {
  using M = wire::StageMetricsT;
  const auto requested = b.sum("task_generator", &M::sent);
  const auto batches = b.sum("buffer", &M::sent);
  const auto trainer_in = b.sum("trainer", &M::received);
  const auto trainer_done = b.sum("trainer", &M::sent) + b.sum("trainer", &M::dropped);
  return requested > 0 && requested >= released_groups &&
         b.extra("task_generator", "groups_judged") >= requested && trainer_in == batches &&
         trainer_done >= trainer_in && b.sum("buffer", &M::dropped) > dropped_before;
}

bool refill_policy::due(const metrics_board& b, std::uint64_t version) {
  if (version > version_) {
    version_ = version;
    in_a_row_ = 0;
  }
  const auto regular = std::min(steps_, version + lookahead_) - std::min(start_, steps_);
  if (in_a_row_ >= max_in_a_row || !loop_ran_dry(b, groups_ * (regular + sent_), dropped_at_last_))
    return false;
  dropped_at_last_ = b.sum("buffer", &wire::StageMetricsT::dropped);
  ++sent_;
  ++in_a_row_;
  return true;
}

std::vector<balance_check> balance(const metrics_board& b) {
  using M = wire::StageMetricsT;
  const auto pool_received = b.sum("sandbox_pool", &M::received);
  const auto pool_done = b.extra("sandbox_pool", "completed") + b.extra("sandbox_pool", "failed");
  // A run stops with the candidates it has not judged yet still in the pool (its queue and the
  // workers' hands): in an async run the sampler is ahead of the sandbox, and no drain waits for
  // a backlog of minutes. The pool counts them, so they are accounted for, not lost.
  const auto pool_left = unjudged_at_stop(b);
  return {
      {"candidates: samplers sent = sandbox pool received", b.sum("sampler", &M::sent), pool_received},
      {"sandbox pool: received = completed + failed + left unjudged at the stop", pool_received,
       pool_done + pool_left},
      {"verdicts: pool completed + failed = reward received", pool_done,
       b.sum("reward", &M::received)},
      {"scored: reward sent = buffer received", b.sum("reward", &M::sent),
       b.sum("buffer", &M::received)},
      {"batches: buffer sent = trainer received", b.sum("buffer", &M::sent),
       b.sum("trainer", &M::received)},
      {"feedback: reward sent = task generator received", b.extra("reward", "feedback_sent"),
       b.extra("task_generator", "feedback")},
      {"observations: reward sent = samplers received", b.extra("reward", "observations_sent"),
       b.extra("sampler", "observations")},
  };
}

std::vector<gpu_group_use> gpu_groups_use(const manifest& m,
                                          const std::map<std::string, std::vector<int>>& gpus,
                                          const metrics_board& b, double elapsed_s) {
  std::vector<gpu_group_use> out;
  for (const auto& g : m.gpu_groups) {
    gpu_group_use u;
    u.name = g.name;
    const auto it = gpus.find(g.name);
    u.gpus = it != gpus.end() ? it->second : g.gpus;
    u.elapsed_s = std::max(0.0, elapsed_s);
    std::map<std::string, std::pair<double, int>> kinds;  // kind -> (busy seconds, instances)
    for (const auto& [key, r] : b.latest) {
      const auto kind = actor_kind_from_string(r.kind);
      if (!kind || !uses_gpu(*kind)) continue;
      const auto* p = m.find_process(r.process);
      const auto* a = p ? p->find(*kind) : nullptr;
      if (!a || a->gpu_group != g.name) continue;
      double busy = 0;
      for (const auto& c : r.extra)
        if (c->name == actors::busy_counter) busy = static_cast<double>(c->value) / 1e6;
      u.stages.push_back({r.stage, r.kind, busy});
      auto& k = kinds[r.kind];
      k.first += busy;
      ++k.second;
    }
    const bool driven = kinds.count("sampler") || kinds.count("trainer");
    for (const auto& [kind, k] : kinds)
      if (!driven || kind != "sandbox_worker") u.busy_s += k.first / k.second;
    if (u.elapsed_s > 0) u.idle_fraction = 1 - std::min(1.0, u.busy_s / u.elapsed_s);
    out.push_back(std::move(u));
  }
  return out;
}

nlohmann::json to_json(const gpu_group_use& g) {
  nlohmann::json stages = nlohmann::json::array();
  for (const auto& s : g.stages)
    stages.push_back({{"stage", s.stage},
                      {"kind", s.kind},
                      {"busy_s", s.busy_s},
                      {"busy_fraction", g.elapsed_s > 0 ? std::min(1.0, s.busy_s / g.elapsed_s) : 0.0}});
  return {{"name", g.name},       {"gpus", g.gpus},           {"stages", stages},
          {"busy_s", g.busy_s},   {"elapsed_s", g.elapsed_s}, {"idle_fraction", g.idle_fraction}};
}

progress_line::progress_line(bool enabled) : enabled_(enabled), tty_(::isatty(2)) {}

void progress_line::draw(std::ostream& err, const std::string& text, bool force) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (tty_) {
    err << "\r\033[K" << text << std::flush;
  } else if (force || now - last_ >= 5s) {
    err << text << "\n" << std::flush;
    last_ = now;
  }
}

void progress_line::end(std::ostream& err) {
  if (enabled_ && tty_) err << "\n";
}

std::string progress_text(const metrics_board& b, std::uint64_t version, std::int64_t steps,
                          double elapsed_s, double time_limit_s) {
  using M = wire::StageMetricsT;
  std::ostringstream s;
  const auto verdicts = b.sum("reward", &M::received);
  s << "step " << version << "/" << steps << " | candidates " << b.sum("sampler", &M::sent)
    << " | verdicts " << verdicts;
  if (verdicts > 0) {
    const double n = static_cast<double>(verdicts);
    s << std::fixed << std::setprecision(1) << " (pass "
      << 100.0 * static_cast<double>(b.extra("reward", "status_ok")) / n << "%, reward "
      << std::setprecision(3) << static_cast<double>(b.extra("reward", reward_sum_counter)) / 1e6 / n
      << ")";
  }
  s << " | batches " << b.sum("trainer", &M::received) << " | queued " << b.queued(false)
    << " | workers " << b.extra("sandbox_pool", "workers_alive") << " alive, "
    << b.extra("sandbox_pool", "requeued") << " requeued | " << std::fixed << std::setprecision(1)
    << elapsed_s << " s";
  if (time_limit_s > 0) s << " (" << std::max(0.0, time_limit_s - elapsed_s) << " s left)";
  return s.str();
}

}  // namespace kforge::pipeline

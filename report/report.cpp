#include "report/report.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <ostream>
#include <sstream>

#include "common/text_file.hpp"
#include "messages/envelope.hpp"
#include "config/manifest.hpp"
#include "report/report_data.hpp"
#include "stages/reward.hpp"
#include "stages/stage_factory.hpp"
#include "report/svg_chart.hpp"
#include "sandbox/eval_command.hpp"

namespace kforge::pipeline {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// A chart of more points than this is thinned (metrics come every 250 ms: an hour is 14,400).
constexpr std::size_t max_points = 400;

// ---- series derived from metrics.jsonl -------------------------------------------------------

/// The totals of one stage kind at time t: each counter summed over the kind's instances, each
/// instance at its latest row.
struct totals {
  double t = 0;
  std::map<std::string, double> v;
  double at(const std::string& k) const {
    auto it = v.find(k);
    return it == v.end() ? 0 : it->second;
  }
};

/// The totals of `kind` after each of its rows, thinned to about max_points (totals are
/// cumulative, so a thinned series' deltas simply span longer intervals). "judged" is added: the
/// verdicts that were the candidate's doing (all statuses but infra_error).
std::vector<totals> timeline(const std::vector<metrics_row>& rows, const std::string& kind) {
  const std::string infra = status_counter(wire::VerdictStatus::infra_error);
  // Adds (sign +1) or takes away (-1) one row's counters from the running sum.
  const auto apply = [&](std::map<std::string, double>& sum, const metrics_row& m, double sign) {
    sum["received"] += sign * static_cast<double>(m.received);
    sum["sent"] += sign * static_cast<double>(m.sent);
    sum["dropped"] += sign * static_cast<double>(m.dropped);
    sum["errors"] += sign * static_cast<double>(m.errors);
    sum["queue_depth"] += sign * static_cast<double>(m.queue_depth);
    for (const auto& [name, n] : m.extra) {
      sum[name] += sign * static_cast<double>(n);
      if (name.rfind("status_", 0) == 0 && name != infra)
        sum["judged"] += sign * static_cast<double>(n);
    }
  };
  std::map<std::string, const metrics_row*> latest;  // by process + instance
  std::map<std::string, double> sum;                 // over the latest rows
  std::vector<totals> out;
  for (const auto& r : rows) {
    if (r.kind != kind) continue;
    auto& last = latest[r.process + "\n" + r.stage];
    if (last) apply(sum, *last, -1);
    apply(sum, r, +1);
    last = &r;
    if (!out.empty() && out.back().t == r.t)
      out.back().v = sum;
    else
      out.push_back(totals{r.t, sum});
  }
  if (out.size() <= max_points) return out;
  const std::size_t k = (out.size() + max_points - 1) / max_points;
  std::vector<totals> thin;
  for (std::size_t i = 0; i < out.size(); i += k) thin.push_back(out[i]);
  if ((out.size() - 1) % k) thin.push_back(out.back());
  return thin;
}

/// Per interval: (delta num) / (delta den) * scale, where delta den > 0. A counter going down (a
/// restarted process) leaves the interval out rather than plotting nonsense.
chart_series interval_ratio(const std::vector<totals>& tl, const std::string& label,
                            const std::string& num, const std::string& den, double scale = 1) {
  chart_series s{label, {}, {}};
  for (std::size_t i = 1; i < tl.size(); ++i) {
    const double dn = tl[i].at(num) - tl[i - 1].at(num), dd = tl[i].at(den) - tl[i - 1].at(den);
    if (dd <= 0 || dn < 0) continue;
    s.x.push_back(tl[i].t);
    s.y.push_back(dn / dd * scale);
  }
  return s;
}

/// Per interval: (delta key) per second.
chart_series interval_rate(const std::vector<totals>& tl, const std::string& label,
                           const std::string& key) {
  chart_series s{label, {}, {}};
  for (std::size_t i = 1; i < tl.size(); ++i) {
    const double dn = tl[i].at(key) - tl[i - 1].at(key), dt = tl[i].t - tl[i - 1].t;
    if (dt <= 0 || dn < 0) continue;
    s.x.push_back(tl[i].t);
    s.y.push_back(dn / dt);
  }
  return s;
}

chart_series gauge(const std::vector<totals>& tl, const std::string& label,
                   const std::string& key) {
  chart_series s{label, {}, {}};
  for (const auto& p : tl) {
    s.x.push_back(p.t);
    s.y.push_back(p.at(key));
  }
  return s;
}

/// train.jsonl field `key` over steps, averaged into at most max_points buckets of steps.
chart_series train_series(const std::vector<train_row>& rows, const std::string& label,
                          const std::string& key) {
  chart_series s{label, {}, {}};
  const std::size_t k = std::max<std::size_t>(1, (rows.size() + max_points - 1) / max_points);
  for (std::size_t i = 0; i < rows.size(); i += k) {
    double sx = 0, sy = 0;
    std::size_t n = 0;
    for (std::size_t j = i; j < std::min(rows.size(), i + k); ++j) {
      auto it = rows[j].find(key);
      if (it == rows[j].end() || !std::isfinite(it->second)) continue;
      sx += rows[j].at("step");
      sy += it->second;
      ++n;
    }
    if (!n) continue;
    s.x.push_back(sx / static_cast<double>(n));
    s.y.push_back(sy / static_cast<double>(n));
  }
  return s;
}

// ---- HTML pieces -----------------------------------------------------------------------------

std::string esc(const std::string& s) { return html_escape(s); }

std::string not_available(const std::string& why) {
  return "<p class=\"na\">not available: " + esc(why) + "</p>\n";
}

/// A chart under its heading, or "not available" with `why` when there is nothing to draw.
std::string chart(const chart_spec& spec, const std::vector<chart_series>& series,
                  const std::string& why) {
  std::string out = "<h3>" + esc(spec.title) + "</h3>\n";
  std::vector<chart_series> drawn;
  for (const auto& s : series)
    if (has_points({s})) drawn.push_back(s);
  return out + (drawn.empty() ? not_available(why) : svg_line_chart(spec, drawn) + "\n");
}

std::string duration(double s) {
  std::ostringstream o;
  if (s < 120) {
    o << format_number(s, 3) << " s";
  } else if (s < 7200) {
    o << format_number(s / 60, 3) << " min";
  } else {
    o << format_number(s / 3600, 3) << " h";
  }
  return o.str();
}

std::string cell(const json& j) {
  if (j.is_string()) return esc(j.get<std::string>());
  if (j.is_number_float()) return esc(format_number(j.get<double>()));
  if (j.is_null()) return "";
  return esc(j.dump());
}

std::string percent(double num, double den) {
  return den > 0 ? format_number(100 * num / den, 3) + "%" : "-";
}

/// A path for an href: relative to `from` where possible, each byte outside a safe set %-encoded.
std::string link_to(const std::string& target, const std::string& from) {
  std::error_code ec;
  fs::path p = fs::relative(target, from, ec);
  if (ec || p.empty()) p = fs::absolute(target, ec);
  std::string out;
  for (unsigned char c : p.generic_string()) {
    if (std::isalnum(c) || c == '/' || c == '.' || c == '_' || c == '-' || c == '~') {
      out += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

// ---- sections --------------------------------------------------------------------------------

/// The stages of a stand-in run that were stand-ins, from its manifest snapshot; nothing when the
/// snapshot is missing or does not parse.
std::vector<actor_kind> stand_in_stages(const run_data& d) {
  if (!d.manifest_text) return {};
  auto m = parse_manifest(*d.manifest_text, "manifest.toml");
  if (!m) return {};
  std::vector<actor_kind> out;
  for (auto k : all_actor_kinds)
    if (m->count(k) > 0 && is_stand_in(k, &*m)) out.push_back(k);
  return out;
}

/// The line at the top of a stand-in run's page: its kernels and speedups were made up by a
/// stand-in sampler or sandbox, not written by a policy and timed on a GPU. Only a stand-in
/// trainer (the snapshot says so) leaves the kernels real.
std::string stand_in_banner(const run_data& d) {
  const auto kinds = stand_in_stages(d);
  std::string names;
  for (auto k : kinds) names += (names.empty() ? "" : ", ") + std::string(to_string(k));
  const bool synthetic_kernels =
      kinds.empty() || std::any_of(kinds.begin(), kinds.end(), [](actor_kind k) {
        return k == actor_kind::sampler || k == actor_kind::sandbox_worker;
      });
  std::string line = synthetic_kernels
                         ? "Stand-in run: the kernels and speedups in this report are synthetic, "
                           "not written by a model and timed on a GPU."
                         : "Stand-in run: nothing was trained (the trainer was a stand-in).";
  if (!names.empty()) line += " Stand-in stages: " + names + ".";
  return "<p class=\"bad\" id=\"stand-in\">" + esc(line) + "</p>\n";
}

std::string header_section(const run_data& d) {
  std::ostringstream o;
  o << "<h1>kforge run: " << esc(d.name) << "</h1>\n";
  if (d.summary && d.summary->is_object() && d.summary->value("stand_ins", false)) o << stand_in_banner(d);
  o << "<table class=\"kv\">\n"
    << "<tr><th>run directory</th><td>" << esc(d.dir) << "</td></tr>\n";
  if (!d.summary) {
    o << "</table>\n"
      << not_available(
             "no summary.json in the run directory (the run has not ended, or it was "
             "killed)");
    return o.str();
  }
  const json& s = *d.summary;
  const auto row = [&](const char* k, const std::string& v) {
    o << "<tr><th>" << k << "</th><td>" << v << "</td></tr>\n";
  };
  const std::string outcome = s.value("outcome", std::string("unknown"));
  row("outcome", "<span class=\"" + std::string(outcome == "completed" ? "ok" : "bad") + "\">" +
                     esc(outcome) + "</span>");
  if (s.contains("steps")) row("steps asked", cell(s["steps"]));
  if (s.contains("versions")) row("policy versions published", cell(s["versions"]));
  if (s.contains("elapsed_s") && s["elapsed_s"].is_number())
    row("duration", esc(duration(s["elapsed_s"].get<double>())));
  if (s.contains("seconds_per_step") && s["seconds_per_step"].is_number())
    row("time per step", esc(duration(s["seconds_per_step"].get<double>())) +
                             " (" + cell(s.value("mode", json("?"))) +
                             " mode; over the loop, start-up and shutdown left out)");
  if (s.contains("stand_ins"))
    row("stand-ins", s.value("stand_ins", false)
                         ? "yes: some stages were synthetic (see manifest and log)"
                         : "no: every stage was real");
  if (s.contains("balanced"))
    row("counts in = counts out", s.value("balanced", false)
                                      ? "<span class=\"ok\">balanced</span>"
                                      : "<span class=\"bad\">NOT balanced</span>");
  o << "</table>\n";
  if (s.contains("gpu_groups") && s["gpu_groups"].is_array() && !s["gpu_groups"].empty()) {
    // Busy = time inside the stages' logic calls (README, "Idle GPU groups").
    o << "<h3>GPU groups</h3>\n<table><tr><th>group</th><th>GPUs</th><th>idle</th><th>busy</th>"
         "<th>stages (busy share of the loop)</th></tr>\n";
    for (const auto& g : s["gpu_groups"]) {
      const auto idle = g.value("idle_fraction", json());
      std::string stages;
      for (const auto& st : g.value("stages", json::array()))
        stages += (stages.empty() ? "" : ", ") + cell(st.value("stage", json())) + " " +
                  (st.value("busy_fraction", json()).is_number()
                       ? percent(st["busy_fraction"].get<double>(), 1)
                       : std::string("-"));
      o << "<tr><td>" << cell(g.value("name", json())) << "</td><td>"
        << cell(g.value("gpus", json())) << "</td><td class=\"n\">"
        << (idle.is_number() ? percent(idle.get<double>(), 1) : "-") << "</td><td class=\"n\">"
        << (g.value("busy_s", json()).is_number() ? esc(duration(g["busy_s"].get<double>())) : "-")
        << "</td><td>" << stages << "</td></tr>\n";
    }
    o << "</table>\n";
  }
  if (s.contains("checks") && s["checks"].is_array()) {
    o << "<h3>Balance "
         "checks</h3>\n<table><tr><th></th><th>check</th><th>left</th><th>right</th></tr>\n";
    for (const auto& c : s["checks"]) {
      const bool ok = c.value("ok", false);
      o << "<tr><td class=\"" << (ok ? "ok\">ok" : "bad\">FAIL") << "</td><td>"
        << cell(c.value("check", json())) << "</td><td class=\"n\">"
        << cell(c.value("left", json())) << "</td><td class=\"n\">"
        << cell(c.value("right", json())) << "</td></tr>\n";
    }
    o << "</table>\n";
  }
  if (s.contains("processes") && s["processes"].is_array() && !s["processes"].empty()) {
    o << "<h3>Processes</h3>\n<table><tr><th>process</th><th>pid</th><th>exit</th></tr>\n";
    for (const auto& p : s["processes"])
      o << "<tr><td>" << cell(p.value("name", json())) << "</td><td class=\"n\">"
        << cell(p.value("pid", json())) << "</td><td>" << cell(p.value("exit", json()))
        << "</td></tr>\n";
    o << "</table>\n";
  }
  return o.str();
}

std::string reward_section(const run_data& d, const std::vector<totals>& reward) {
  std::ostringstream o;
  o << "<h2>Reward and verdicts</h2>\n";
  const std::string no_train =
      "no train.jsonl in the run directory (the trainer is a stand-in, "
      "or no training step finished)";
  if (d.train)
    o << chart({"Reward mean per training step", "step", "mean reward"},
               {train_series(*d.train, "reward_mean (train.jsonl)", "reward_mean")},
               "train.jsonl has no reward_mean");
  else
    o << "<h3>Reward mean per training step</h3>\n" << not_available(no_train);
  const std::string no_counters =
      d.metrics ? "metrics.jsonl has no reward counters (a run older than them, or no verdict)"
                : "no metrics.jsonl in the run directory";
  o << chart(
      {"Reward mean per interval", "time (s)", "mean reward"},
      {interval_ratio(reward, "reward (scored samples)", reward_sum_counter, scored_counter, 1e-6)},
      no_counters);
  const auto rate = [&](wire::VerdictStatus st, const char* label) {
    return interval_ratio(reward, label, status_counter(st), "judged");
  };
  // Pass, compile-error and hack rates always; any other status only where it happened.
  using VS = wire::VerdictStatus;
  std::vector<chart_series> rates = {rate(VS::ok, "pass (ok)"),
                                     rate(VS::compile_error, "compile error"),
                                     rate(VS::hack_suspected, "hack suspected")};
  for (auto st : wire::EnumValuesVerdictStatus())
    if (st != VS::ok && st != VS::compile_error && st != VS::hack_suspected &&
        st != VS::infra_error && !reward.empty() && reward.back().at(status_counter(st)) > 0)
      rates.push_back(rate(st, wire::EnumNameVerdictStatus(st)));
  chart_spec spec{"Verdicts per interval, share of judged verdicts (infra errors left out)",
                  "time (s)", "share"};
  spec.percent = true;
  o << chart(spec, rates, no_counters);
  return o.str();
}

std::string training_section(const run_data& d) {
  std::ostringstream o;
  o << "<h2>Training</h2>\n";
  if (!d.train) {
    o << not_available(
        "no train.jsonl in the run directory (the trainer is a stand-in, or no "
        "training step finished)");
    return o.str();
  }
  if (d.train_earlier)
    o << "<p class=\"note\">train.jsonl also holds " << d.train_earlier
      << " line(s) of earlier runs into this directory (the steps started over after them); "
         "only the last run's steps are shown.</p>\n";
  const auto& t = *d.train;
  const std::string why = "train.jsonl has no such field";
  o << chart({"Loss", "step", "loss"},
             {train_series(t, "loss", "loss"), train_series(t, "policy_loss", "policy_loss"),
              train_series(t, "kl_loss", "kl_loss")},
             why);
  chart_spec kl{"KL to the reference policy", "step", "KL (k3)"};
  o << chart(kl, {train_series(t, "kl", "kl"), train_series(t, "kl window mean", "kl_window_mean")},
             why);
  o << chart({"KL coefficient", "step", "coefficient"}, {train_series(t, "kl_coef", "kl_coef")},
             why);
  o << chart({"Tokens per second (trainer)", "step", "completion tokens / s"},
             {train_series(t, "tokens_per_s", "tokens_per_s")}, why);
  chart_spec clip{"Clip fraction", "step", "share of tokens"};
  clip.percent = true;
  o << chart(clip, {train_series(t, "clip_fraction", "clip_fraction")}, why);
  o << chart({"Gradient norm", "step", "norm"}, {train_series(t, "grad_norm", "grad_norm")}, why);
  // How much of each batch taught anything: the buffer's dedup shrinks batches, and all-equal
  // groups are left out of the loss; draw_signal_groups is what group_baseline = "draws" adds.
  o << chart({"Training batch: samples and groups", "step", "count"},
             {train_series(t, "samples trained on", "samples"),
              train_series(t, "all-equal groups (no signal)", "equal_groups"),
              train_series(t, "groups with a signal only against the draws", "draw_signal_groups")},
             why);
  return o.str();
}

std::string flow_section(const run_data& d) {
  std::ostringstream o;
  o << "<h2>Throughput and queues</h2>\n";
  if (!d.metrics) {
    o << not_available("no metrics.jsonl in the run directory");
    return o.str();
  }
  const auto& rows = *d.metrics;
  o << chart({"Samples per second", "time (s)", "per second"},
             {interval_rate(timeline(rows, "sampler"), "candidates (samplers sent)", "sent"),
              interval_rate(timeline(rows, "reward"), "verdicts (reward received)", "received"),
              interval_rate(timeline(rows, "trainer"), "batches (trainer received)", "received")},
             "metrics.jsonl has no sampler, reward or trainer rows");
  std::vector<std::string> kinds;
  for (const auto& r : rows)
    if (r.kind != "bus" && std::find(kinds.begin(), kinds.end(), r.kind) == kinds.end())
      kinds.push_back(r.kind);
  std::vector<chart_series> queues;
  for (const auto& k : kinds) queues.push_back(gauge(timeline(rows, k), k, "queue_depth"));
  o << chart({"Queue depth per stage", "time (s)", "messages waiting"}, queues,
             "metrics.jsonl has no stage rows");
  return o.str();
}

std::string tables_section(const std::vector<totals>& reward) {
  std::ostringstream o;
  o << "<h2>Verdicts and speedups (whole run)</h2>\n";
  if (reward.empty() || reward.back().at(scored_counter) + reward.back().at("judged") == 0) {
    o << not_available("no reward counters in metrics.jsonl");
    return o.str();
  }
  const auto& last = reward.back();
  double all = 0;
  const auto& statuses = wire::EnumValuesVerdictStatus();
  for (auto st : statuses) all += last.at(status_counter(st));
  o << "<h3>Verdicts by status</h3>\n<table><tr><th>status</th><th>count</th><th>share</th></tr>\n";
  for (auto st : statuses) {
    const double n = last.at(status_counter(st));
    o << "<tr><td>" << esc(wire::EnumNameVerdictStatus(st)) << "</td><td class=\"n\">"
      << format_number(n, 12) << "</td><td class=\"n\">" << percent(n, all) << "</td></tr>\n";
  }
  const double scored = last.at(scored_counter);
  o << "</table>\n<p>" << format_number(scored, 12) << " samples scored; mean reward "
    << (scored > 0 ? format_number(last.at(reward_sum_counter) / 1e6 / scored) : "-") << ".</p>\n";

  double timed = 0;
  for (const auto& b : speedup_buckets) timed += last.at(b.counter);
  o << "<h3>Speedup distribution of correct kernels (over the reference, same run)</h3>\n";
  if (timed == 0) {
    o << not_available("no correct kernel with timings");
    return o.str();
  }
  o << "<table><tr><th>speedup</th><th>kernels</th><th>share</th><th>at least this "
       "fast</th></tr>\n";
  double above = timed;
  for (const auto& b : speedup_buckets) {
    const double n = last.at(b.counter);
    o << "<tr><td>" << esc(b.label) << "</td><td class=\"n\">" << format_number(n, 12)
      << "</td><td class=\"n\">" << percent(n, timed) << "</td><td class=\"n\">"
      << percent(above, timed) << "</td></tr>\n";
    above -= n;
  }
  o << "</table>\n";
  if (const double u = last.at(speedup_unknown_counter); u > 0)
    o << "<p class=\"note\">" << format_number(u, 12) << " correct kernel(s) without timings are "
      << "left out.</p>\n";
  return o.str();
}

/// One row of the per-level table: summarize_verdicts' per-task figures for one group.
void field_row(std::ostream& o, const std::string& group, const json& t) {
  const auto& best = t.at("fast_p_best_of_samples");
  o << "<tr><td>" << esc(group) << "</td><td class=\"n\">" << t.at("tasks").get<std::size_t>()
    << "</td><td class=\"n\">" << percent(t.at("correct_best_of_samples").get<double>(), 1)
    << "</td><td class=\"n\">" << percent(t.at("correct_mean_over_samples").get<double>(), 1) << "</td>";
  for (const char* p : {"fast_1", "fast_1.5", "fast_2"})
    o << "<td class=\"n\">" << percent(best.at(p).get<double>(), 1) << "</td>";
  const bool any = t.value("correct_kernels", 0) > 0;
  for (const char* k : {"geomean_speedup", "median_speedup"})
    o << "<td class=\"n\">" << (any ? format_number(t.value(k, 0.0), 3) + "x" : std::string("-")) << "</td>";
  o << "</tr>\n";
}

/// Every recorded verdict, counted per task as KernelBench and CUDA Agent count (kforge eval's
/// summary), over the whole run and per level and category.
std::string field_section(const run_data& d) {
  std::ostringstream o;
  o << "<h2>Per level and category (every recorded verdict, counted per task)</h2>\n";
  if (!d.verdicts || d.verdicts->lines.empty()) {
    o << not_available(d.verdicts ? "the verdict recordings hold no verdict"
                                  : "no verdict recordings (add \"verdicts\" to [record] links)");
    return o.str();
  }
  const auto s = sandbox::summarize_verdicts(d.verdicts->lines);
  o << "<p>" << d.verdicts->lines.size() << " verdicts from " << d.verdicts->files.size()
    << " recording(s). A task is correct when one of its samples was, and fast_p when its best "
       "correct kernel beat the reference by more than p; the mean over samples counts each "
       "sample. Speedups are over the reference the sandbox timed (eager).</p>\n"
       "<table><tr><th>tasks</th><th>count</th><th>correct (best of samples)</th>"
       "<th>correct (mean over samples)</th><th>fast_1</th><th>fast_1.5</th><th>fast_2</th>"
       "<th>geomean speedup</th><th>median</th></tr>\n";
  field_row(o, "all", s.at("per_task"));
  for (const char* group : {"by_level", "by_category"})
    for (const auto& [name, t] : s.at(group).items()) field_row(o, name, t);
  o << "</table>\n";
  for (const auto& torn : d.verdicts->torn)
    o << "<p class=\"note\">Counted up to a torn record: " << esc(torn) << "</p>\n";
  return o.str();
}

std::string best_section(const run_data& d, const std::string& out_dir) {
  std::ostringstream o;
  o << "<h2>Best kernel per task</h2>\n";
  if (d.best.empty()) {
    o << not_available("no best/*.json in the run directory (no correct kernel with timings yet)");
    return o.str();
  }
  double log_sum = 0;
  for (const auto& b : d.best) log_sum += std::log(std::max(b.speedup, 1e-12));
  o << "<p>" << d.best.size() << " task(s) with a correct kernel; geometric mean of their best "
    << "speedups " << format_number(std::exp(log_sum / static_cast<double>(d.best.size())), 3)
    << "x.</p>\n<table><tr><th>task</th><th>speedup</th><th>kernel ms</th><th>reference ms</th>"
       "<th>policy version</th><th>source</th><th>audit</th></tr>\n";
  for (const auto& b : d.best) {
    o << "<tr><td>" << esc(b.task) << "</td><td class=\"n\">" << format_number(b.speedup, 4)
      << "x</td><td class=\"n\">" << format_number(b.candidate_ms, 4) << "</td><td class=\"n\">"
      << format_number(b.baseline_ms, 4) << "</td><td class=\"n\">" << b.policy_version
      << "</td><td>";
    if (b.source_path.empty())
      o << "missing";
    else
      o << "<a href=\"" << esc(link_to(b.source_path, out_dir)) << "\">"
        << esc(fs::path(b.source_path).filename().string()) << "</a>";
    o << "</td><td>" << esc(b.audit) << "</td></tr>\n";
  }
  o << "</table>\n";
  return o.str();
}

std::string stages_section(const run_data& d) {
  std::ostringstream o;
  o << "<h2>Final stage counters</h2>\n";
  if (!d.summary || !d.summary->contains("stages") || !(*d.summary)["stages"].is_array()) {
    o << not_available("no stage counters in summary.json");
    return o.str();
  }
  o << "<table><tr><th>stage</th><th>process</th><th>received</th><th>sent</th><th>dropped</th>"
       "<th>errors</th><th>queued</th><th>p50 us</th><th>p99 us</th><th>last error</th></tr>\n";
  for (const auto& s : (*d.summary)["stages"]) {
    o << "<tr><td>" << cell(s.value("stage", json())) << "</td><td>"
      << cell(s.value("process", json())) << "</td>";
    for (const char* k : {"received", "sent", "dropped", "errors", "queue_depth", "latency_p50_us",
                          "latency_p99_us"})
      o << "<td class=\"n\">" << cell(s.value(k, json())) << "</td>";
    o << "<td>" << cell(s.value("last_error", json())) << "</td></tr>\n";
  }
  o << "</table>\n";
  return o.str();
}

constexpr const char* style = R"(<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px auto; max-width: 980px; color: #222; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 32px; border-bottom: 1px solid #ccc; }
h3 { font-size: 15px; margin: 18px 0 6px; }
table { border-collapse: collapse; margin: 6px 0; } th, td { padding: 2px 10px; text-align: left; }
tr:nth-child(even) td { background: #f6f6f6; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
.kv th { color: #555; font-weight: normal; } .ok { color: #1a7f37; }
.bad { color: #c62828; font-weight: bold; }
.na { color: #777; font-style: italic; } .note { color: #555; }
svg.chart { font: 11px system-ui, sans-serif; display: block; } svg.chart text { fill: #333; }
pre { background: #f6f6f6; padding: 8px; overflow-x: auto; }
</style>
)";

}  // namespace

result<std::string> render_report(const std::string& run_dir, const std::string& out_dir) {
  auto loaded = load_run(run_dir);
  if (!loaded) return loaded.err();
  const run_data& d = *loaded;
  const auto reward = d.metrics ? timeline(*d.metrics, "reward") : std::vector<totals>{};

  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>kforge run "
    << esc(d.name) << "</title>\n"
    << style << "</head><body>\n";
  o << header_section(d);
  o << reward_section(d, reward);
  o << training_section(d);
  o << flow_section(d);
  o << tables_section(reward);
  o << field_section(d);
  o << best_section(d, out_dir);
  o << stages_section(d);
  o << "<h2>Manifest</h2>\n";
  if (d.manifest_text)
    o << "<details><summary>manifest.toml</summary><pre>" << esc(*d.manifest_text)
      << "</pre></details>\n";
  else
    o << not_available("no manifest.toml in the run directory");
  o << "<p class=\"note\">Written by <code>kforge report</code> from the files of " << esc(d.dir)
    << ".</p>\n</body></html>\n";
  return o.str();
}

result<std::string> write_report(const std::string& run_dir,
                                 const std::optional<std::string>& out) {
  const fs::path path = out ? fs::path(*out) : fs::path(run_dir) / "report.html";
  std::error_code ec;
  auto out_dir = fs::absolute(path, ec).parent_path();
  auto html = render_report(run_dir, out_dir.string());
  if (!html) return html.err();
  if (auto s = write_text_file_atomically(path.string(), *html); !s)
    return error{"the report: " + s.message()};
  return path.string();
}

int report_command(const report_options& opt, std::ostream& out, std::ostream& err) {
  auto path = write_report(opt.run_dir, opt.out);
  if (!path) {
    err << "kforge report: " << path.message() << "\n";
    return 1;
  }
  out << path.value() << "\n";
  return 0;
}

}  // namespace kforge::pipeline

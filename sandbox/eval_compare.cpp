#include "sandbox/eval_compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <utility>

#include "common/text_file.hpp"

namespace kforge::sandbox {

using json = nlohmann::json;

result<eval_by_task> parse_eval_verdicts(const std::string& text, const std::string& name) {
  eval_by_task out;
  std::istringstream in(text);
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const auto where = name + ":" + std::to_string(line_no) + ": ";
    const auto v = json::parse(line, nullptr, false);
    if (v.is_discarded() || !v.is_object())
      return error{where + "not a JSON object (expected a kforge eval verdict line)"};
    const auto task = v.find("task");
    const auto status = v.find("status");
    if (task == v.end() || !task->is_string() || task->get<std::string>().empty())
      return error{where + "no \"task\" string"};
    if (status == v.end() || !status->is_string())
      return error{where + "no \"status\" string"};
    const auto st = status->get<std::string>();
    if (st == "compiled")
      return error{where + "a compile-only verdict (status \"compiled\": nothing was run), so there "
                           "is no pass rate to compare; eval on a GPU"};
    auto& t = out[task->get<std::string>()];
    if (st == "infra_error") {
      ++t.infra_errors;
      continue;
    }
    ++t.samples;
    if (st != "ok") continue;
    ++t.correct;
    const auto s = v.find("speedup");
    if (s == v.end()) continue;  // correct, but not timed: counts as passing, adds no speedup
    if (!s->is_number() || !std::isfinite(s->get<double>()) || s->get<double>() < 0)
      return error{where + "\"speedup\" is not a finite number >= 0"};
    t.speedup_sum += s->get<double>();
    t.correct_speedups.push_back(s->get<double>());
  }
  if (out.empty()) return error{name + ": no verdict lines"};
  return out;
}

result<eval_by_task> read_eval_verdicts(const std::string& path) {
  auto text = read_text_file(path);
  if (!text) return text.err();
  return parse_eval_verdicts(*text, path);
}

eval_by_task best_of_task(const eval_by_task& e) {
  eval_by_task out;
  for (const auto& [task, t] : e) {
    auto& b = out[task];
    b.infra_errors = t.infra_errors;
    if (t.samples == 0) continue;
    b.samples = 1;
    b.correct = t.correct > 0;
    if (t.correct_speedups.empty()) continue;
    const double best = *std::max_element(t.correct_speedups.begin(), t.correct_speedups.end());
    b.speedup_sum = best;
    b.correct_speedups = {best};
  }
  return out;
}

namespace {

/// Linear interpolation between the closest ranks of sorted `v` (the usual "type 7" quantile).
double quantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0.0;
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const auto hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (pos - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0.0 : s / static_cast<double>(v.size());
}

/// Sample standard deviation (n - 1); 0 for fewer than 2 values.
double sd(const std::vector<double>& v) {
  if (v.size() < 2) return 0.0;
  const double m = mean(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size() - 1));
}

json side(const eval_by_task& e) {
  int samples = 0, correct = 0, any = 0, half = 0, fast = 0, infra = 0;
  std::vector<double> pass, speed, timed;
  double log_sum = 0;
  for (const auto& [task, t] : e) {
    samples += t.samples;
    correct += t.correct;
    infra += t.infra_errors;
    any += t.correct > 0;
    half += 2 * t.correct >= t.samples && t.correct > 0;
    pass.push_back(t.pass_rate());
    speed.push_back(t.mean_speedup());
    for (double s : t.correct_speedups) {
      timed.push_back(s);
      fast += s > 1.0;
      log_sum += std::log(std::max(s, 1e-12));
    }
  }
  std::sort(timed.begin(), timed.end());
  return json{
      {"tasks", e.size()},
      {"samples", samples},
      {"correct", correct},
      {"infra_errors_left_out", infra},
      {"tasks_with_a_correct_sample", any},
      {"tasks_half_or_more_correct", half},
      {"pass_rate", {{"mean", mean(pass)}, {"sd", sd(pass)}}},
      {"mean_speedup", {{"mean", mean(speed)}, {"sd", sd(speed)}}},
      {"correct_speedup",
       {{"timed", timed.size()},
        {"median", quantile(timed, 0.5)},
        {"geomean", timed.empty() ? 0.0 : std::exp(log_sum / static_cast<double>(timed.size()))}}},
      {"fast_1", samples > 0 ? static_cast<double>(fast) / samples : 0.0},
  };
}

/// The mean of `d` and its bootstrap interval over its entries (tasks), with a word for it.
json difference(const std::vector<double>& d, int resamples, std::mt19937_64& rng) {
  std::vector<double> means;
  means.reserve(static_cast<std::size_t>(resamples));
  std::uniform_int_distribution<std::size_t> pick(0, d.size() - 1);
  for (int r = 0; r < resamples; ++r) {
    double s = 0;
    for (std::size_t i = 0; i < d.size(); ++i) s += d[pick(rng)];
    means.push_back(s / static_cast<double>(d.size()));
  }
  std::sort(means.begin(), means.end());
  const double lo = quantile(means, 0.025), hi = quantile(means, 0.975);
  const char* word = lo > 0 ? "higher" : hi < 0 ? "lower" : "not shown different";
  return json{{"estimate", mean(d)}, {"lo", lo}, {"hi", hi}, {"word", word}};
}

std::string some(const std::vector<std::string>& names) {
  std::string s;
  for (std::size_t i = 0; i < names.size() && i < 5; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > 5) s += ", ...";
  return s;
}

}  // namespace

result<json> compare_evals(const eval_by_task& before, const eval_by_task& after, int resamples,
                           std::uint64_t seed) {
  if (resamples < 100) return error{"resamples must be >= 100, got " + std::to_string(resamples)};
  std::vector<std::string> only_before, only_after;
  for (const auto& [task, t] : before)
    if (!after.count(task)) only_before.push_back(task);
  for (const auto& [task, t] : after)
    if (!before.count(task)) only_after.push_back(task);
  if (!only_before.empty() || !only_after.empty())
    return error{"the two files do not hold the same tasks (a paired comparison needs them): " +
                 std::to_string(only_before.size()) + " only before (" + some(only_before) +
                 "), " + std::to_string(only_after.size()) + " only after (" + some(only_after) +
                 ")"};
  if (before.size() < 2)
    return error{"a comparison needs at least 2 tasks (the interval is over tasks), got " +
                 std::to_string(before.size())};
  for (const auto& [name, side] : {std::pair{"before", &before}, std::pair{"after", &after}})
    for (const auto& [task, t] : *side)
      if (t.samples == 0)
        return error{std::string(name) + ", task " + task + ": every verdict is an infra_error "
                     "(the sandbox failed, not the kernel): nothing to compare"};

  std::vector<double> d_pass, d_speed;
  json rose = json::array(), fell = json::array();
  int same = 0;
  for (const auto& [task, b] : before) {
    const auto& a = after.at(task);
    d_pass.push_back(a.pass_rate() - b.pass_rate());
    d_speed.push_back(a.mean_speedup() - b.mean_speedup());
    const json row = {{"task", task},
                      {"before", std::to_string(b.correct) + "/" + std::to_string(b.samples)},
                      {"after", std::to_string(a.correct) + "/" + std::to_string(a.samples)}};
    if (d_pass.back() > 0) rose.push_back(row);
    else if (d_pass.back() < 0) fell.push_back(row);
    else ++same;
  }
  std::mt19937_64 rng(seed);
  return json{{"before", side(before)},
              {"after", side(after)},
              {"difference",
               {{"pass_rate", difference(d_pass, resamples, rng)},
                {"mean_speedup", difference(d_speed, resamples, rng)}}},
              {"tasks_rose", rose},
              {"tasks_fell", fell},
              {"tasks_same", same},
              {"bootstrap", {{"resamples", resamples}, {"seed", seed}, {"level", 0.95}}}};
}

std::string format_comparison(const json& c) {
  std::ostringstream os;
  char buf[256];
  const auto& b = c.at("before");
  const auto& a = c.at("after");
  auto row = [&](const char* what, const std::string& x, const std::string& y) {
    std::snprintf(buf, sizeof buf, "%-44s %18s %18s\n", what, x.c_str(), y.c_str());
    os << buf;
  };
  auto fmt = [&](const char* f, double x) {
    std::snprintf(buf, sizeof buf, f, x);
    return std::string(buf);
  };
  auto mean_sd = [&](const json& j) {
    return fmt("%.3f", j.at("mean").get<double>()) + " (" + fmt("%.3f", j.at("sd").get<double>()) + ")";
  };
  auto count = [](const json& j, const char* k, const char* of) {
    return std::to_string(j.at(k).get<int>()) + " / " + std::to_string(j.at(of).get<int>());
  };
  row("", "before", "after");
  row("correct samples", count(b, "correct", "samples"), count(a, "correct", "samples"));
  if (b.at("infra_errors_left_out").get<int>() + a.at("infra_errors_left_out").get<int>() > 0)
    row("infra_error verdicts (left out)", std::to_string(b.at("infra_errors_left_out").get<int>()),
        std::to_string(a.at("infra_errors_left_out").get<int>()));
  row("tasks with >= 1 correct", count(b, "tasks_with_a_correct_sample", "tasks"),
      count(a, "tasks_with_a_correct_sample", "tasks"));
  row("tasks with >= half correct", count(b, "tasks_half_or_more_correct", "tasks"),
      count(a, "tasks_half_or_more_correct", "tasks"));
  row("pass rate per task: mean (sd)", mean_sd(b.at("pass_rate")), mean_sd(a.at("pass_rate")));
  row("speedup per task, fail = 0: mean (sd)", mean_sd(b.at("mean_speedup")),
      mean_sd(a.at("mean_speedup")));
  auto speeds = [&](const json& j) {
    const auto& s = j.at("correct_speedup");
    return fmt("%.2fx", s.at("median").get<double>()) + " / " + fmt("%.2fx", s.at("geomean").get<double>());
  };
  row("correct kernels' speedup: median / geomean", speeds(b), speeds(a));
  row("fast_1 (correct and faster than eager)", fmt("%.1f%%", 100 * b.at("fast_1").get<double>()),
      fmt("%.1f%%", 100 * a.at("fast_1").get<double>()));
  const auto& boot = c.at("bootstrap");
  os << "\nafter - before, 95% paired bootstrap over " << b.at("tasks").get<int>() << " tasks ("
     << boot.at("resamples").get<int>() << " resamples, seed " << boot.at("seed").get<std::uint64_t>()
     << "):\n";
  for (const char* k : {"pass_rate", "mean_speedup"}) {
    const auto& d = c.at("difference").at(k);
    std::snprintf(buf, sizeof buf, "  %-13s %+.4f  [%+.4f, %+.4f]  %s\n", k,
                  d.at("estimate").get<double>(), d.at("lo").get<double>(), d.at("hi").get<double>(),
                  d.at("word").get<std::string>().c_str());
    os << buf;
  }
  os << "tasks whose pass rate rose / fell / stayed: " << c.at("tasks_rose").size() << " / "
     << c.at("tasks_fell").size() << " / " << c.at("tasks_same").get<int>() << "\n";
  const std::pair<const char*, const char*> lists[] = {{"tasks_rose", "rose"}, {"tasks_fell", "fell"}};
  for (const auto& [key, word] : lists)
    for (const auto& t : c.at(key))
      os << "  " << word << " " << t.at("task").get<std::string>() << ": "
         << t.at("before").get<std::string>() << " -> " << t.at("after").get<std::string>() << "\n";
  return os.str();
}

int compare_command(const compare_options& o, std::ostream& out, std::ostream& err) {
  auto before = read_eval_verdicts(o.before);
  if (!before) {
    err << "kforge compare: " << before.message() << "\n";
    return 2;
  }
  auto after = read_eval_verdicts(o.after);
  if (!after) {
    err << "kforge compare: " << after.message() << "\n";
    return 2;
  }
  if (o.best_of_task) {
    *before = best_of_task(*before);
    *after = best_of_task(*after);
  }
  auto c = compare_evals(*before, *after, o.resamples, o.seed);
  if (!c) {
    err << "kforge compare: " << o.before << " vs " << o.after << ": " << c.message() << "\n";
    return 2;
  }
  (*c)["per_task"] = o.best_of_task ? "best sample" : "mean over samples";
  if (o.best_of_task) out << "each task's best sample (passes when any sample is correct, at its best speedup)\n";
  (*c)["before"]["file"] = o.before;
  (*c)["after"]["file"] = o.after;
  out << format_comparison(*c);
  if (!o.json.empty()) {
    std::ofstream f(o.json, std::ios::trunc);
    f << c->dump(2) << "\n";
    if (!f) {
      err << "kforge compare: cannot write " << o.json << "\n";
      return 2;
    }
  }
  return 0;
}

}  // namespace kforge::sandbox

#include "stages/reward.hpp"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

namespace kforge::pipeline {

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  const auto mid = v.begin() + v.size() / 2;
  std::nth_element(v.begin(), mid, v.end());
  if (v.size() % 2) return *mid;
  return (*mid + *std::max_element(v.begin(), mid)) / 2;
}

}  // namespace

std::string status_counter(wire::VerdictStatus s) {
  const char* name = wire::EnumNameVerdictStatus(s);
  return std::string("status_") + (*name ? name : "unknown");
}

double reference_speedup(const wire::Verdict& v) noexcept {
  const double gen = v.candidate_timing() ? v.candidate_timing()->median_ms() : 0;
  const double ref = v.baseline_timing() ? v.baseline_timing()->median_ms() : 0;
  return gen > 0 && ref > 0 ? ref / gen : 0;
}

void reward_counters::add(const wire::Verdict& v, const wire::ScoredT& s) {
  const auto st = static_cast<std::size_t>(v.status());
  if (st < status.size()) ++status[st];
  if (s.excluded.empty()) {
    ++scored;
    // Rewards are >= 0 by the formula and the [reward] checks (manifest_read.cpp); a negative one
    // would be a bug, and counts as 0 rather than wrapping the unsigned sum.
    reward_sum_micro += static_cast<std::uint64_t>(std::llround(std::max(0.0, s.reward) * 1e6));
  }
  if (v.status() != wire::VerdictStatus::ok) return;
  const double x = reference_speedup(v);
  if (x <= 0) {
    ++speedup_unknown;
    return;
  }
  for (std::size_t i = 0; i < speedup_buckets.size(); ++i)
    if (x >= speedup_buckets[i].lo && x < speedup_buckets[i].hi) ++speedup[i];
}

std::vector<std::pair<std::string, std::uint64_t>> reward_counters::named() const {
  std::vector<std::pair<std::string, std::uint64_t>> out;
  auto put = [&](std::string name, std::uint64_t n) {
    if (n) out.emplace_back(std::move(name), n);
  };
  for (std::size_t i = 0; i < status.size(); ++i)
    put(status_counter(static_cast<wire::VerdictStatus>(i)), status[i]);
  for (std::size_t i = 0; i < speedup.size(); ++i) put(speedup_buckets[i].counter, speedup[i]);
  put(speedup_unknown_counter, speedup_unknown);
  put(scored_counter, scored);
  put(reward_sum_counter, reward_sum_micro);
  put("best_updates", best_updates);
  put("best_write_errors", best_write_errors);
  return out;
}

double reward_model::correct_reward(double speedup) const noexcept {
  const double speed = speedup > 0 ? std::clamp(1 + opt_.alpha * (speedup - 1), 0.0, 2.0) : 1.0;
  return opt_.correctness_weight + opt_.speed_weight * speed;
}

void reward_model::maybe_switch(std::uint64_t version) {
  if (opt_.baseline_check_every <= 0 ||
      version < last_check_ + static_cast<std::uint64_t>(opt_.baseline_check_every))
    return;
  last_check_ = version;
  for (auto& [id, t] : tasks_)
    if (!t.switched && !t.speedups.empty() && median(t.speedups) > opt_.baseline_switch_speedup)
      t.switched = true;
}

wire::ScoredT reward_model::score(const wire::Verdict& v, std::uint64_t version) {
  maybe_switch(version);
  wire::ScoredT out;
  out.verdict.reset(v.UnPack());
  out.policy_version = version;
  if (v.status() == wire::VerdictStatus::infra_error) {
    ++excluded_;
    out.excluded = "infra_error: " + (v.reason() ? v.reason()->str() : std::string("no reason"));
    return out;
  }
  ++scored_;
  if (v.status() == wire::VerdictStatus::compiled) {  // compile-only mode: unverified
    out.reward = opt_.compiled_reward;
    return out;
  }
  if (v.status() != wire::VerdictStatus::ok) return out;  // reward 0

  const auto* c = v.candidate();
  const std::string task = c && c->task() && c->task()->id() ? c->task()->id()->str() : "";
  auto& t = tasks_[task];
  const double gen = v.candidate_timing() ? v.candidate_timing()->median_ms() : 0;
  const double ref = v.baseline_timing() ? v.baseline_timing()->median_ms() : 0;
  if (ref > 0) t.reference_ms = ref;
  const double reference_base = t.reference_ms * reference_scale(task);
  // The baseline used for this sample is fixed before this sample updates the best time.
  const double base = t.switched && t.best_ms > 0 ? t.best_ms : reference_base;
  out.baseline_kind = t.switched && t.best_ms > 0 ? wire::BaselineKind::best_kernel
                                                  : wire::BaselineKind::reference_eager;
  out.baseline_ms = base;
  out.speedup = gen > 0 && base > 0 ? base / gen : 0;
  out.reward = correct_reward(out.speedup);
  if (gen > 0) {
    if (reference_base > 0) t.speedups.push_back(reference_base / gen);
    if (t.best_ms == 0 || gen < t.best_ms) t.best_ms = gen;
  }
  return out;
}

std::size_t reward_model::switched_tasks() const noexcept {
  return static_cast<std::size_t>(
      std::count_if(tasks_.begin(), tasks_.end(), [](const auto& kv) { return kv.second.switched; }));
}

std::string reward_model::to_json() const {
  nlohmann::json tasks = nlohmann::json::object();
  for (const auto& [id, t] : tasks_)
    tasks[id] = {{"reference_ms", t.reference_ms},
                 {"best_ms", t.best_ms},
                 {"speedups", t.speedups},
                 {"switched", t.switched}};
  return nlohmann::json{{"last_check", last_check_},
                        {"scored", scored_},
                        {"excluded", excluded_},
                        {"tasks", tasks}}
      .dump();
}

status reward_model::from_json(const std::string& text) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return error{"reward state: not a JSON object"};
  try {
    std::map<std::string, task_state> tasks;
    for (const auto& [id, t] : j.at("tasks").items())
      tasks[id] = task_state{t.at("reference_ms").get<double>(), t.at("best_ms").get<double>(),
                             t.at("speedups").get<std::vector<double>>(),
                             t.at("switched").get<bool>()};
    last_check_ = j.at("last_check").get<std::uint64_t>();
    scored_ = j.at("scored").get<std::uint64_t>();
    excluded_ = j.at("excluded").get<std::uint64_t>();
    tasks_ = std::move(tasks);
  } catch (const nlohmann::json::exception& e) {
    return error{std::string("reward state: ") + e.what()};
  }
  return {};
}

}  // namespace kforge::pipeline

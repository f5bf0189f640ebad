#include "trainer/kl_controller.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <vector>

#include <nlohmann/json.hpp>

namespace kforge::trainer {

namespace {

bool finite(double x) { return std::isfinite(x); }

const char* mode_name(kl_step_mode m) {
  return m == kl_step_mode::additive ? "additive" : "multiplicative";
}

}  // namespace

status validate(const kl_controller_options& o) {
  auto bad = [](const std::string& field, const std::string& why) {
    return error{"kl_controller." + field + ": " + why};
  };
  if (!finite(o.target_low) || o.target_low < 0) return bad("target_low", "must be >= 0");
  if (!finite(o.target_high) || o.target_high <= o.target_low)
    return bad("target_high", "must be > target_low");
  if (o.window < 1) return bad("window", "must be >= 1");
  if (o.mode == kl_step_mode::multiplicative && !(finite(o.step) && o.step > 1))
    return bad("step", "must be > 1 in multiplicative mode");
  if (o.mode == kl_step_mode::additive && !(finite(o.step) && o.step > 0))
    return bad("step", "must be > 0 in additive mode");
  if (!finite(o.min_coef) || o.min_coef < 0) return bad("min_coef", "must be >= 0");
  if (o.mode == kl_step_mode::multiplicative && o.min_coef <= 0)
    return bad("min_coef", "must be > 0 in multiplicative mode (0 could never grow)");
  if (!finite(o.max_coef) || o.max_coef < o.min_coef) return bad("max_coef", "must be >= min_coef");
  if (!finite(o.initial_coef) ||
      (o.initial_coef != 0 && (o.initial_coef < o.min_coef || o.initial_coef > o.max_coef)))
    return bad("initial_coef", "must be 0 (no KL penalty) or inside [min_coef, max_coef]");
  return {};
}

kl_controller::kl_controller(kl_controller_options opt)
    : opt_(opt), enabled_(opt.initial_coef != 0), coef_(opt.initial_coef) {
  if (auto s = validate(opt_); !s) throw std::invalid_argument(s.message());
}

double kl_controller::window_mean() const noexcept {
  return window_.empty() ? 0.0 : window_sum_ / static_cast<double>(window_.size());
}

kl_update kl_controller::update(double step_kl) {
  kl_update u;
  if (!finite(step_kl)) {
    ++rejected_;
    u.coef = coef_;
    u.window_mean = window_mean();
    u.accepted = false;
    return u;
  }
  window_.push_back(step_kl);
  while (window_.size() > static_cast<std::size_t>(opt_.window)) window_.pop_front();
  // A fresh sum each step (at most `window` adds) keeps the mean exact to the window's contents,
  // so a resumed controller computes the same means as the uninterrupted one.
  window_sum_ = std::accumulate(window_.begin(), window_.end(), 0.0);
  ++steps_;

  const double mean = window_mean();
  const double before = coef_;
  if (enabled_) {
    const bool mult = opt_.mode == kl_step_mode::multiplicative;
    // The mean says which way; this step's KL must agree (the header says why).
    if (mean > opt_.target_high && step_kl > opt_.target_high)
      coef_ = mult ? coef_ * opt_.step : coef_ + opt_.step;
    else if (mean < opt_.target_low && step_kl < opt_.target_low)
      coef_ = mult ? coef_ / opt_.step : coef_ - opt_.step;
    coef_ = std::clamp(coef_, opt_.min_coef, opt_.max_coef);
  }
  u.coef = coef_;
  u.window_mean = mean;
  u.direction = coef_ > before ? 1 : (coef_ < before ? -1 : 0);
  return u;
}

std::string kl_controller::to_json() const {
  return nlohmann::json{{"version", 1},
                        {"coef", coef_},
                        {"window", std::vector<double>(window_.begin(), window_.end())},
                        {"steps", steps_},
                        {"rejected", rejected_},
                        {"mode", mode_name(opt_.mode)}}
      .dump();
}

status kl_controller::from_json(const std::string& text) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return error{"kl_controller state: not a JSON object"};
  try {
    if (j.at("version").get<int>() != 1)
      return error{"kl_controller state: version: unsupported (expected 1)"};
    const double coef = j.at("coef").get<double>();
    auto values = j.at("window").get<std::vector<double>>();
    const auto steps = j.at("steps").get<std::int64_t>();
    const auto rejected = j.at("rejected").get<std::int64_t>();
    if (!enabled_ && coef != 0)
      return error{"kl_controller state: coef: not 0, but these options switch the KL penalty off"};
    if (enabled_ && !(finite(coef) && coef >= opt_.min_coef && coef <= opt_.max_coef))
      return error{"kl_controller state: coef: outside [min_coef, max_coef] of these options"};
    if (!std::all_of(values.begin(), values.end(), finite))
      return error{"kl_controller state: window: holds a non-finite value"};
    if (steps < 0 || rejected < 0 || static_cast<std::int64_t>(values.size()) > steps)
      return error{"kl_controller state: steps: inconsistent with the window"};
    std::deque<double> window(values.begin(), values.end());
    while (window.size() > static_cast<std::size_t>(opt_.window)) window.pop_front();
    coef_ = coef;
    window_ = std::move(window);
    window_sum_ = std::accumulate(window_.begin(), window_.end(), 0.0);
    steps_ = steps;
    rejected_ = rejected;
  } catch (const nlohmann::json::exception& e) {
    return error{std::string("kl_controller state: ") + e.what()};
  }
  return {};
}

}  // namespace kforge::trainer

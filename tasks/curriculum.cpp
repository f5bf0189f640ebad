#include "tasks/curriculum.hpp"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

namespace kforge::tasks {

namespace {

using json = nlohmann::json;

constexpr const char* state_format = "kforge.curriculum/1";

std::uint64_t splitmix64(std::uint64_t& state) noexcept {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// Index drawn from `w` (non-negative, positive sum) with `u` in [0, 1).
std::size_t draw(const std::vector<double>& w, double total, double u) {
  const double target = u * total;
  double acc = 0;
  std::size_t last_positive = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (w[i] <= 0) continue;
    acc += w[i];
    last_positive = i;
    if (target < acc) return i;
  }
  return last_positive;  // rounding at the top end
}

}  // namespace

std::string_view to_string(sampling_mode m) {
  return m == sampling_mode::uniform ? "uniform" : "curriculum";
}

std::optional<sampling_mode> parse_sampling_mode(std::string_view s) {
  if (s == "uniform") return sampling_mode::uniform;
  if (s == "curriculum") return sampling_mode::curriculum;
  return std::nullopt;
}

status check(const curriculum_options& o) {
  if (o.window < 1) return error{"window: must be >= 1, got 0"};
  if (!(o.floor >= 0) || !std::isfinite(o.floor))
    return error{"floor: must be a finite number >= 0, got " + std::to_string(o.floor)};
  if (!(o.unseen_bonus >= 0) || !std::isfinite(o.unseen_bonus))
    return error{"unseen_bonus: must be a finite number >= 0, got " +
                 std::to_string(o.unseen_bonus)};
  return {};
}

result<curriculum> curriculum::create(std::vector<std::string> ids, curriculum_options o,
                                      std::uint64_t seed) {
  if (auto s = check(o); !s) return error{"curriculum options: " + s.message()};
  curriculum c;
  c.options_ = o;
  c.rng_ = seed;
  for (auto& id : ids)
    if (auto s = c.add_task(std::move(id)); !s) return s.err();
  return c;
}

status curriculum::add_task(std::string id) {
  if (id.empty()) return error{"curriculum: a task id is empty"};
  if (index_.count(id)) return error{"curriculum: task '" + id + "' is already in the pool"};
  index_.emplace(id, tasks_.size());
  tasks_.push_back(entry{std::move(id), 0, {}});
  return {};
}

status curriculum::observe(std::string_view id, bool passed, double reward) {
  const auto i = find(id);
  if (!i) return error{"curriculum: result for unknown task '" + std::string(id) + "'"};
  if (!std::isfinite(reward))
    return error{"curriculum: non-finite reward for task '" + std::string(id) + "'"};
  auto& e = tasks_[*i];
  e.results.emplace_back(passed, reward);
  while (e.results.size() > options_.window) e.results.pop_front();
  ++e.total;
  return {};
}

std::optional<std::size_t> curriculum::find(std::string_view id) const {
  const auto it = index_.find(std::string(id));
  if (it == index_.end()) return std::nullopt;
  return it->second;
}

task_stats curriculum::stats(std::size_t index) const {
  const auto& e = tasks_.at(index);
  task_stats s;
  s.total = e.total;
  s.window = e.results.size();
  if (s.window == 0) return s;
  double passes = 0, reward = 0;
  for (const auto& [p, r] : e.results) {
    passes += p ? 1 : 0;
    reward += r;
  }
  s.pass_rate = passes / static_cast<double>(s.window);
  s.mean_reward = reward / static_cast<double>(s.window);
  return s;
}

double curriculum::weight(std::size_t index) const {
  if (options_.mode == sampling_mode::uniform) return 1.0;
  const auto s = stats(index);
  if (s.window == 0) return 0.25 + options_.floor + options_.unseen_bonus;
  return s.pass_rate * (1.0 - s.pass_rate) + options_.floor;
}

double curriculum::next_unit() {
  return static_cast<double>(splitmix64(rng_) >> 11) * 0x1.0p-53;
}

std::size_t curriculum::sample() { return sample(1).front(); }

std::vector<std::size_t> curriculum::sample(std::size_t n) {
  std::vector<std::size_t> out;
  if (tasks_.empty()) return out;
  out.reserve(n);
  // A round draws without replacement; when no positive weight is left, the next round starts.
  std::vector<double> w;
  for (std::size_t k = 0; k < n; ++k) {
    double total = 0;
    for (double x : w) total += x;
    if (total <= 0) {
      w.resize(tasks_.size());
      for (std::size_t i = 0; i < w.size(); ++i) total += (w[i] = weight(i));
      if (total <= 0) {  // every weight is 0 (floor 0, all solved or hopeless): uniform
        std::fill(w.begin(), w.end(), 1.0);
        total = static_cast<double>(w.size());
      }
    }
    const auto i = draw(w, total, next_unit());
    out.push_back(i);
    w[i] = 0;
  }
  return out;
}

std::string curriculum::to_json() const {
  json tasks = json::array();
  for (const auto& e : tasks_) {
    json results = json::array();
    for (const auto& [p, r] : e.results) results.push_back(json::array({p, r}));
    tasks.push_back({{"id", e.id}, {"total", e.total}, {"results", std::move(results)}});
  }
  json j = {{"format", state_format},
            {"mode", std::string(to_string(options_.mode))},
            {"window", options_.window},
            {"floor", options_.floor},
            {"unseen_bonus", options_.unseen_bonus},
            {"rng", rng_},
            {"tasks", std::move(tasks)}};
  return j.dump();
}

result<curriculum> curriculum::from_json(std::string_view text) {
  const std::string where = "curriculum state: ";
  const json j = json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded()) return error{where + "not valid JSON"};
  if (!j.is_object()) return error{where + "expected a JSON object"};
  const auto field = [&](const char* name) -> const json* {
    const auto it = j.find(name);
    return it == j.end() ? nullptr : &*it;
  };
  const json* format = field("format");
  if (!format || !format->is_string() || format->get<std::string>() != state_format)
    return error{where + "format: expected \"" + state_format + "\""};

  curriculum_options o;
  const json* mode = field("mode");
  if (!mode || !mode->is_string()) return error{where + "mode: missing or not a string"};
  const auto m = parse_sampling_mode(mode->get<std::string>());
  if (!m) return error{where + "mode: unknown mode '" + mode->get<std::string>() +
                       "' (uniform, curriculum)"};
  o.mode = *m;
  const json* window = field("window");
  if (!window || !window->is_number_unsigned())
    return error{where + "window: missing or not a non-negative integer"};
  o.window = window->get<std::size_t>();
  const json* floor = field("floor");
  if (!floor || !floor->is_number()) return error{where + "floor: missing or not a number"};
  o.floor = floor->get<double>();
  const json* bonus = field("unseen_bonus");
  if (!bonus || !bonus->is_number()) return error{where + "unseen_bonus: missing or not a number"};
  o.unseen_bonus = bonus->get<double>();
  if (auto s = check(o); !s) return error{where + s.message()};
  const json* rng = field("rng");
  if (!rng || !rng->is_number_unsigned())
    return error{where + "rng: missing or not a non-negative integer"};

  const json* tasks = field("tasks");
  if (!tasks || !tasks->is_array()) return error{where + "tasks: missing or not an array"};
  curriculum c;
  c.options_ = o;
  c.rng_ = rng->get<std::uint64_t>();
  for (std::size_t i = 0; i < tasks->size(); ++i) {
    const json& t = (*tasks)[i];
    const std::string path = where + "tasks[" + std::to_string(i) + "]";
    if (!t.is_object()) return error{path + ": expected an object"};
    const auto id = t.find("id");
    if (id == t.end() || !id->is_string()) return error{path + ".id: missing or not a string"};
    if (auto s = c.add_task(id->get<std::string>()); !s) return error{path + ".id: " + s.message()};
    auto& e = c.tasks_.back();
    const auto total = t.find("total");
    if (total == t.end() || !total->is_number_unsigned())
      return error{path + ".total: missing or not a non-negative integer"};
    e.total = total->get<std::uint64_t>();
    const auto results = t.find("results");
    if (results == t.end() || !results->is_array())
      return error{path + ".results: missing or not an array"};
    if (results->size() > o.window || results->size() > e.total)
      return error{path + ".results: " + std::to_string(results->size()) +
                   " results, more than the window or the total"};
    for (std::size_t k = 0; k < results->size(); ++k) {
      const json& r = (*results)[k];
      if (!r.is_array() || r.size() != 2 || !r[0].is_boolean() || !r[1].is_number() ||
          !std::isfinite(r[1].get<double>()))
        return error{path + ".results[" + std::to_string(k) +
                     "]: expected [passed (bool), reward (finite number)]"};
      e.results.emplace_back(r[0].get<bool>(), r[1].get<double>());
    }
  }
  return c;
}

}  // namespace kforge::tasks

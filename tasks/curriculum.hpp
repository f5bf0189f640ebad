#pragma once
// Which task to pose next. Per task, the curriculum keeps a sliding window of its last K results
// (passed, reward) and samples either uniformly or by a weight that favours tasks the policy solves
// sometimes: a task it always fails or always solves gives a GRPO group with no variance and so no
// gradient. Weight of a seen task: p(1 - p) + floor, p its pass rate in the window; an unseen task
// gets the largest seen weight (0.25 + floor) plus an exploration bonus, so every task is tried.
//
// Deterministic: the same seed, tasks and sequence of observe/sample calls give the same samples
// on every host (its own generator; no std:: distribution, whose output differs between standard
// libraries). to_json/from_json carry the whole state, generator included, for checkpoints.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/result.hpp"

namespace kforge::tasks {

enum class sampling_mode {
  uniform,     ///< every task equally likely
  curriculum,  ///< weights from recent pass rates (see the file comment)
};

std::string_view to_string(sampling_mode m);
std::optional<sampling_mode> parse_sampling_mode(std::string_view s);

struct curriculum_options {
  /// uniform or curriculum.
  sampling_mode mode = sampling_mode::curriculum;
  /// K: results per task kept in the sliding window. >= 1.
  std::size_t window = 32;
  /// Added to every seen task's p(1 - p), so solved and hopeless tasks still come up now and then.
  /// >= 0; with 0, such tasks are never posed again while others have a positive weight.
  double floor = 0.02;
  /// Added to an unseen task's weight (on top of 0.25 + floor). >= 0.
  double unseen_bonus = 0.25;
};

/// An error naming the field when an option is out of range.
status check(const curriculum_options& o);

/// A task's recent record.
struct task_stats {
  std::uint64_t total = 0;   ///< results ever observed
  std::size_t window = 0;    ///< results in the window (<= options.window)
  double pass_rate = 0;      ///< over the window; 0 when the window is empty
  double mean_reward = 0;    ///< over the window; 0 when the window is empty
};

class curriculum {
 public:
  /// `ids` must be unique and non-empty; options are checked.
  static result<curriculum> create(std::vector<std::string> ids, curriculum_options o,
                                   std::uint64_t seed);

  /// Adds a task (unseen). An error if the id is already known.
  status add_task(std::string id);

  /// Records one result of task `id`. An error if the id is unknown.
  status observe(std::string_view id, bool passed, double reward);

  /// One task index, drawn by the current weights.
  std::size_t sample();
  /// `n` task indices for one step: without replacement while tasks with a positive weight
  /// remain, then with replacement (n may exceed the number of tasks).
  std::vector<std::size_t> sample(std::size_t n);

  /// The sampling weight of task `index` (unnormalised; 1 for every task in uniform mode).
  double weight(std::size_t index) const;
  task_stats stats(std::size_t index) const;
  std::size_t size() const noexcept { return tasks_.size(); }
  const std::string& id(std::size_t index) const { return tasks_[index].id; }
  /// The index of `id`, or nullopt.
  std::optional<std::size_t> find(std::string_view id) const;
  const curriculum_options& options() const noexcept { return options_; }

  /// The whole state as one JSON object (options, generator state, every task's window).
  std::string to_json() const;
  /// A curriculum from to_json's text; an error names the field ("tasks[3].results[1]: ...").
  static result<curriculum> from_json(std::string_view text);

 private:
  struct entry {
    std::string id;
    std::uint64_t total = 0;
    std::deque<std::pair<bool, double>> results;  ///< oldest first, at most options_.window
  };
  curriculum() = default;
  double next_unit();  ///< uniform in [0, 1)

  curriculum_options options_;
  std::uint64_t rng_ = 0;
  std::vector<entry> tasks_;
  std::unordered_map<std::string, std::size_t> index_;
};

}  // namespace kforge::tasks

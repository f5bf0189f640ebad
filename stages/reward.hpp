#pragma once
// The reward stage's logic (docs/architecture.md, "Reward"): a verdict becomes a scalar.
//
//   not ok          -> 0
//   ok              -> correctness_weight + speed_weight * clamp(1 + alpha (t_base / t_gen - 1), 0, 2)
//   infra_error     -> no reward at all: the sample is marked excluded (the sandbox's fault, not the
//                      candidate's) and still forwarded so its GRPO group can complete.
//
// t_base starts as the task's reference eager time (or, with [reward] baseline = "compile", that
// time rescaled to torch.compile's: reward_compile_baseline.hpp) and switches, per task, to the
// best kernel time seen so far once the median speedup over that first baseline passes
// baseline_switch_speedup; the switch is checked every baseline_check_every policy versions. The state is plain data, so it can be
// checkpointed (to_json / from_json) and a replay from the same inputs reproduces every output.

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/result.hpp"
#include "messages/envelope.hpp"
#include "config/options/reward_options.hpp"
#include "stages/reward_compile_baseline.hpp"

namespace kforge::pipeline {

/// A speedup bucket of the reward's counters: [lo, hi) times faster than the reference.
struct speedup_bucket {
  const char* counter;  ///< the extra counter's name in metrics.jsonl
  const char* label;    ///< for people: "1.5-2x"
  double lo, hi;
};
/// The buckets, in order; they cover [0, inf). `kforge report` reads the counters by these names.
inline constexpr std::array<speedup_bucket, 6> speedup_buckets{{
    {"speedup_lt_0.5", "< 0.5x", 0.0, 0.5},
    {"speedup_0.5_1", "0.5-1x", 0.5, 1.0},
    {"speedup_1_1.5", "1-1.5x", 1.0, 1.5},
    {"speedup_1.5_2", "1.5-2x", 1.5, 2.0},
    {"speedup_2_4", "2-4x", 2.0, 4.0},
    {"speedup_ge_4", ">= 4x", 4.0, 1e300},
}};
/// Ok verdicts without both timings (no speedup to bucket).
inline constexpr const char* speedup_unknown_counter = "speedup_unknown";
/// Sum of the rewards given, in millionths (extra counters are integers), and how many there were:
/// their deltas over an interval give the interval's mean reward.
inline constexpr const char* reward_sum_counter = "reward_sum_micro";
inline constexpr const char* scored_counter = "scored";
/// "status_" + the verdict status's schema name ("status_ok", "status_compile_error", ...).
std::string status_counter(wire::VerdictStatus s);

/// The speedup of a verdict's kernel over the reference, both timed in the same sandbox run
/// (baseline / candidate median); 0 when either timing is missing. Unlike Scored.speedup it does
/// not change meaning when a task's baseline switches to the best kernel, so it is what the
/// counters bucket and what the best kernels are ranked by.
double reference_speedup(const wire::Verdict& v) noexcept;

/// What the reward stage saw, counted: verdicts per status, ok verdicts per speedup bucket, and the
/// rewards given. Plain data: the stage keeps one since its last report and hands it to the actor
/// as extra metrics (named()), so per-interval rates and means follow from deltas of the totals.
struct reward_counters {
  std::array<std::uint64_t, 10> status{};  ///< by wire::VerdictStatus value (ok .. compiled)
  std::array<std::uint64_t, speedup_buckets.size()> speedup{};
  std::uint64_t speedup_unknown = 0;
  std::uint64_t scored = 0;            ///< samples given a reward (all but excluded ones)
  std::uint64_t reward_sum_micro = 0;  ///< sum of those rewards * 1e6, each rounded
  std::uint64_t best_updates = 0;      ///< new best kernels written (best_kernels.hpp)
  std::uint64_t best_write_errors = 0; ///< best kernels that could not be written

  /// Counts verdict `v` and what the reward model made of it.
  void add(const wire::Verdict& v, const wire::ScoredT& s);
  /// The non-zero counters as (metrics name, value).
  std::vector<std::pair<std::string, std::uint64_t>> named() const;
};

class reward_model {
 public:
  /// `compile`: the per-task scale of baseline = "compile" (load_compile_scale); unused for eager.
  explicit reward_model(reward_options opt, compile_scale compile = {})
      : opt_(std::move(opt)), compile_(std::move(compile)) {}

  /// Scores `v`, produced by a candidate of policy version `version`.
  wire::ScoredT score(const wire::Verdict& v, std::uint64_t version);

  /// The reward of a correct kernel with this speedup over its baseline (speedup <= 0: unknown,
  /// the speed term is neutral).
  double correct_reward(double speedup) const noexcept;

  std::string to_json() const;
  status from_json(const std::string& text);

  std::uint64_t scored() const noexcept { return scored_; }
  std::uint64_t excluded() const noexcept { return excluded_; }
  /// Correct kernels of tasks without a compile time, under baseline = "compile".
  std::uint64_t compile_missing() const noexcept { return compile_missing_; }
  /// Tasks whose baseline is now the best kernel seen.
  std::size_t switched_tasks() const noexcept;

 private:
  struct task_state {
    double reference_ms = 0;             ///< latest reference eager time reported by the sandbox
    double best_ms = 0;                  ///< fastest correct kernel seen
    std::vector<double> speedups;        ///< over the reference, of correct kernels
    bool switched = false;               ///< baseline is best_ms from now on
  };
  void maybe_switch(std::uint64_t version);
  /// What the reference's eager time is multiplied by to give the first baseline: 1 (eager), the
  /// task's compile / eager ratio, or 0 where it has none (reward_compile_baseline.cpp).
  double reference_scale(const std::string& task);

  reward_options opt_;
  compile_scale compile_;
  std::uint64_t compile_missing_ = 0;
  std::map<std::string, task_state> tasks_;
  std::uint64_t last_check_ = 0;
  std::uint64_t scored_ = 0;
  std::uint64_t excluded_ = 0;
};

}  // namespace kforge::pipeline

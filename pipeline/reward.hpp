#pragma once
// The reward stage's logic (ARCHITECTURE.md, "Reward"): a verdict becomes a scalar.
//
//   not ok          -> 0
//   ok              -> correctness_weight + speed_weight * clamp(1 + alpha (t_base / t_gen - 1), 0, 2)
//   infra_error     -> no reward at all: the sample is marked excluded (the sandbox's fault, not the
//                      candidate's) and still forwarded so its GRPO group can complete.
//
// t_base starts as the task's reference eager time and switches, per task, to the best kernel time
// seen so far once the median speedup over the reference passes baseline_switch_speedup; the switch
// is checked every baseline_check_every policy versions. The state is plain data, so it can be
// checkpointed (to_json / from_json) and a replay from the same inputs reproduces every output.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/result.hpp"
#include "messages/envelope.hpp"
#include "pipeline/options/reward_options.hpp"

namespace kforge::pipeline {

class reward_model {
 public:
  explicit reward_model(reward_options opt) : opt_(opt) {}

  /// Scores `v`, produced by a candidate of policy version `version`.
  wire::ScoredT score(const wire::Verdict& v, std::uint64_t version);

  /// The reward of a correct kernel with this speedup over its baseline (speedup <= 0: unknown,
  /// the speed term is neutral).
  double correct_reward(double speedup) const noexcept;

  std::string to_json() const;
  status from_json(const std::string& text);

  std::uint64_t scored() const noexcept { return scored_; }
  std::uint64_t excluded() const noexcept { return excluded_; }
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

  reward_options opt_;
  std::map<std::string, task_state> tasks_;
  std::uint64_t last_check_ = 0;
  std::uint64_t scored_ = 0;
  std::uint64_t excluded_ = 0;
};

}  // namespace kforge::pipeline

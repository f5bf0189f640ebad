#pragma once
// Settings of the reward stage, from the manifest's [reward] table (formula in docs/architecture.md):
// reward = correctness_weight * 1 + speed_weight * clamp(1 + alpha * (t_base / t_gen - 1), 0, 2)
// for a correct kernel, 0 otherwise.

#include <cstdint>
#include <string>

namespace kforge {

/// What a task's first baseline t_base is: the reference's eager time as the sandbox measures it,
/// or that time rescaled to torch.compile's by a baselines file (stages/reward_compile_baseline.hpp).
enum class reward_baseline { eager, compile };

struct reward_options {
  /// Slope of the speed term around speedup 1. >= 0 (0 ignores speed).
  double alpha = 2.0;
  /// Weight of the correctness term. >= 0; the two weights must not both be 0.
  double correctness_weight = 0.5;
  /// Weight of the speed term. >= 0.
  double speed_weight = 0.5;
  /// Median speedup over the reference at which a task's baseline switches from the reference's
  /// eager time to the best kernel seen so far. >= 1.
  double baseline_switch_speedup = 2.0;
  /// How often, in training steps, the switch condition is checked. >= 1.
  std::int64_t baseline_check_every = 15;
  /// Reward of a `compiled` verdict: the kernel passed the static checks and compiled, but no GPU
  /// was there to verify it (compile-only mode). The only signal such a run has. In
  /// [0, correctness_weight]: never more than a verified correct kernel gets for correctness.
  double compiled_reward = 0.1;
  /// eager, or compile: t_base = the sandbox's eager time * compile_ms / eager_ms of `baselines`'
  /// line for the task (tasks/measured_baselines.hpp).
  reward_baseline baseline = reward_baseline::eager;
  /// The baselines file (`kforge tasks baseline --against compile --out`); required with compile.
  std::string baselines;
};

}  // namespace kforge

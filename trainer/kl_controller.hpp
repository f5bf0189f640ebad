#pragma once
// Adaptive coefficient of the KL penalty to the reference policy (docs/architecture.md, "Trainer").
//
// Every training step reports its mean KL (k3 estimator, token mean). The controller keeps the mean
// over a sliding window of the last `window` steps inside [target_low, target_high]: after each step,
// a window mean above the band raises the coefficient one step, a mean below the band lowers it one
// step, a mean inside the band leaves it alone; the result is clamped to [min_coef, max_coef].
// The window mean lags the current KL by up to `window` steps, so a step moves the coefficient only
// where its own KL is on the same side of the band as the mean: evidence the KL is still off, not
// one old spike counted again at every step. Without that rule, a default run (2026-12-03, 23 steps
// against a 100-step window) raised the coefficient at 9 steps in a row, 0.018 to 0.68, on one KL
// of 0.049 at step 3 while every later step's KL was at or below the band (bench/RESULTS.md).
//
// Torch-free on purpose: plain numbers in, plain numbers out, state as JSON for checkpoints.

#include <cstdint>
#include <deque>
#include <string>

#include "common/result.hpp"

namespace kforge::trainer {

/// How a step changes the coefficient.
enum class kl_step_mode {
  multiplicative,  ///< up: coef * step, down: coef / step (step > 1)
  additive,        ///< up: coef + step, down: coef - step (step > 0)
};

struct kl_controller_options {
  /// Coefficient before any step has been seen. Inside [min_coef, max_coef], or exactly 0: no KL
  /// penalty at all (the coefficient stays 0; the KL is still recorded so it can be logged).
  double initial_coef = 0.04;
  /// Lower end of the target band for the window mean of the KL. >= 0.
  double target_low = 1e-3;
  /// Upper end of the target band. > target_low.
  double target_high = 5e-3;
  /// Number of most recent steps the mean KL is taken over. >= 1.
  std::int64_t window = 100;
  /// Whether `step` multiplies/divides or adds/subtracts.
  kl_step_mode mode = kl_step_mode::multiplicative;
  /// Size of one adjustment: a factor > 1 (multiplicative) or an increment > 0 (additive).
  double step = 1.5;
  /// Smallest coefficient. >= 0; > 0 in multiplicative mode (0 could never grow again).
  double min_coef = 1e-4;
  /// Largest coefficient. >= min_coef.
  double max_coef = 1.0;
};

/// Checks the options; the error names the field and the reason.
[[nodiscard]] status validate(const kl_controller_options& opt);

/// What one update did, for the per-step log line.
struct kl_update {
  double coef = 0;         ///< coefficient to use for the next step
  double window_mean = 0;  ///< mean KL over the window, this step included
  int direction = 0;       ///< +1 raised, -1 lowered, 0 unchanged (mean in band, this step's KL
                           ///< not on the mean's side, at a bound, or rejected)
  bool accepted = true;    ///< false: the KL was not finite and was not recorded
};

class kl_controller {
 public:
  /// `opt` must pass validate(); an invalid one throws std::invalid_argument (a bug in the caller).
  explicit kl_controller(kl_controller_options opt);

  /// Records the mean KL of one training step and adjusts the coefficient. A non-finite KL
  /// (a diverged step) is not recorded and leaves the coefficient alone; it is counted.
  kl_update update(double step_kl);

  double coef() const noexcept { return coef_; }
  /// Mean over the window; 0 before the first step.
  double window_mean() const noexcept;
  /// Steps currently in the window (at most options().window).
  std::size_t window_size() const noexcept { return window_.size(); }
  /// Steps recorded since the start (checkpoints included).
  std::int64_t steps() const noexcept { return steps_; }
  /// Non-finite KL values rejected since the start.
  std::int64_t rejected() const noexcept { return rejected_; }
  const kl_controller_options& options() const noexcept { return opt_; }

  /// State (coefficient, window, counters) for a checkpoint. Doubles round-trip exactly.
  std::string to_json() const;
  /// Restores a to_json() state under this controller's options. A window longer than
  /// options().window keeps its newest entries; a coefficient outside the bounds is an error.
  /// On error the controller is unchanged.
  status from_json(const std::string& text);

 private:
  kl_controller_options opt_;
  bool enabled_;  ///< initial_coef != 0; a disabled controller keeps coef_ at 0
  double coef_;
  std::deque<double> window_;
  double window_sum_ = 0;  ///< recomputed from window_ on every change: no drift from add/remove
  std::int64_t steps_ = 0;
  std::int64_t rejected_ = 0;
};

}  // namespace kforge::trainer

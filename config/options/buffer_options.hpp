#pragma once
// Settings of the buffer stage, from the manifest's [buffer] table.

namespace kforge {

/// Where a sample whose (prompt hash, code hash) was seen before counts as a duplicate.
enum class dedup_scope {
  /// Within its GRPO group: a group keeps one of each kernel, and a kernel the policy wrote for
  /// the prompt at an earlier step is trained on again (it is still what the policy writes).
  group,
  /// Across the whole run: a kernel is trained on once per prompt. Later groups lose every kernel
  /// the policy wrote before, so a task the policy has learned stops giving signal.
  run,
  /// Never: every sample is kept (a repeated kernel is an independent draw of the policy).
  off,
};

/// Upper bound of groups_per_batch: far above any real batch; a larger value is a typo.
inline constexpr int max_groups_per_batch = 4096;

struct buffer_options {
  /// Samples generated more than this many policy versions ago are dropped. >= 0; 0 trains only on
  /// samples from the current policy.
  int max_staleness = 2;
  /// Whole GRPO groups per training batch (batch size = groups_per_batch * sampler.group_size).
  /// In [1, max_groups_per_batch].
  int groups_per_batch = 8;
  dedup_scope dedup = dedup_scope::group;
  /// Whether the manifest set dedup. A run directory's manifest.toml from before the key existed
  /// (2026-12-02) does not, and its run deduplicated across the whole run: --resume and replay say so.
  bool dedup_set = false;
  /// Serve a group left with one kept sample when its draws' rewards differ (it has a signal
  /// against them). Not a manifest key: set where the trainer takes its baseline from the draws
  /// (trainer.group_baseline = "draws"); with "kept", one sample is a group of its own mean.
  bool serve_single_with_draws = false;
};

}  // namespace kforge

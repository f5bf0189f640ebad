#pragma once
// Settings of the buffer stage, from the manifest's [buffer] table.

namespace kforge {

struct buffer_options {
  /// Samples generated more than this many policy versions ago are dropped. >= 0; 0 trains only on
  /// samples from the current policy.
  int max_staleness = 2;
  /// Whole GRPO groups per training batch (batch size = groups_per_batch * sampler.group_size). >= 1.
  int groups_per_batch = 8;
};

}  // namespace kforge

#pragma once
// The buffer stage's logic (docs/architecture.md, "Buffer"): scored samples in, training batches of
// whole GRPO groups out.
//
// - A sample whose (prompt_hash, code_hash) was seen before is a duplicate: dropped and counted.
//   buffer.dedup says where "before" looks: its own group (default), the whole run, or nowhere.
// - A sample more than max_staleness policy versions older than the newest weights is stale.
// - Excluded samples (infra_error) count towards their group's arrival but are never trained on.
// - A group is complete when all group_size members arrived; it is served if at least two members
//   are kept (GRPO normalises within the group), or one whose draws differ where the trainer takes
//   its baseline from the draws (serve_single_with_draws), else dropped as too small. A group
//   that went stale while it was open is dropped as stale.
// - groups_per_batch complete groups make one TrainBatch.
// - A served group also carries the reward of every member that got one (draw_rewards), the
//   duplicates included: with dedup the kept samples are the policy's rarer kernels, so their own
//   mean is not the group's (trainer.group_baseline).
// Every sample in is accounted for: kept (and later batched or dropped stale), or dropped by reason.

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "messages/envelope.hpp"
#include "config/options/buffer_options.hpp"

namespace kforge::pipeline {

/// Every sample received ends in exactly one of: duplicate, stale, excluded, small_group, served,
/// or is still pending in an open or ready group: received == sum of those (see accounted()).
struct buffer_counters {
  std::uint64_t received = 0;
  std::uint64_t duplicate = 0;
  std::uint64_t stale = 0;        ///< dropped for age, on arrival or while its group waited
  std::uint64_t excluded = 0;     ///< no reward (infra_error)
  std::uint64_t small_group = 0;  ///< kept, but its group ended with fewer than two kept samples
  std::uint64_t served = 0;       ///< sent to the trainer in a batch
  std::uint64_t groups_served = 0;
  std::uint64_t groups_too_small = 0;
  std::uint64_t batches = 0;
};

class sample_buffer {
 public:
  explicit sample_buffer(buffer_options opt) : opt_(opt) {}

  /// Adds one scored sample generated under `version`; returns the batches it completed.
  std::vector<wire::TrainBatchT> add(const wire::Scored& s, std::uint64_t version);

  /// dedup_scope::run: (prompt hash, code hash) pairs seen so far, and one to count as seen before
  /// any sample (a resumed run's, from seen_kernels_journal).
  std::size_t seen_kernels() const noexcept { return seen_.size(); }
  void remember(std::uint64_t prompt_hash, std::uint64_t code_hash) {
    seen_.emplace(prompt_hash, code_hash);
  }

  /// The newest policy version the trainer published; queued groups now too old are dropped.
  void set_policy_version(std::uint64_t v);

  const buffer_counters& counters() const noexcept { return counters_; }
  /// Groups with members still outstanding.
  std::size_t open_groups() const noexcept { return open_.size(); }
  /// Complete groups waiting for a batch.
  std::size_t ready_groups() const noexcept { return ready_.size(); }
  /// Kept samples waiting in open or ready groups.
  std::uint64_t pending() const noexcept;
  /// Whether every received sample is counted exactly once (the buffer's in == out invariant).
  bool accounted() const noexcept;

 private:
  struct group {
    std::uint32_t expected = 0;
    std::uint32_t arrived = 0;
    std::uint64_t oldest_version = UINT64_MAX;
    std::unique_ptr<wire::SampleGroupT> kept;
    std::set<std::uint64_t> codes;  ///< code hashes seen in this group (dedup_scope::group)
  };
  bool is_stale(std::uint64_t version) const noexcept;
  static bool draws_differ(const wire::SampleGroupT& g);
  bool is_duplicate(group& g, std::uint64_t prompt_hash, std::uint64_t code_hash);
  std::vector<wire::TrainBatchT> take_batches();

  buffer_options opt_;
  std::uint64_t policy_version_ = 0;
  std::set<std::pair<std::uint64_t, std::uint64_t>> seen_;  ///< dedup_scope::run only
  std::map<std::uint64_t, group> open_;  ///< by group_id
  std::deque<group> ready_;
  buffer_counters counters_;
};

}  // namespace kforge::pipeline

#include "stages/sample_buffer.hpp"

#include <algorithm>

namespace kforge::pipeline {

bool sample_buffer::is_stale(std::uint64_t version) const noexcept {
  return policy_version_ > version &&
         policy_version_ - version > static_cast<std::uint64_t>(opt_.max_staleness);
}

bool sample_buffer::draws_differ(const wire::SampleGroupT& g) {
  const auto [lo, hi] = std::minmax_element(g.draw_rewards.begin(), g.draw_rewards.end());
  return lo != g.draw_rewards.end() && *lo != *hi;
}

bool sample_buffer::is_duplicate(group& g, std::uint64_t prompt_hash, std::uint64_t code_hash) {
  switch (opt_.dedup) {
    case dedup_scope::group: return !g.codes.insert(code_hash).second;  // one group, one prompt
    case dedup_scope::run: return !seen_.emplace(prompt_hash, code_hash).second;
    case dedup_scope::off: return false;
  }
  return false;
}

std::vector<wire::TrainBatchT> sample_buffer::add(const wire::Scored& s, std::uint64_t version) {
  ++counters_.received;
  const auto* v = s.verdict();
  const auto* c = v ? v->candidate() : nullptr;
  const std::uint64_t group_id = c ? c->group_id() : 0;
  auto& g = open_[group_id];
  g.expected = std::max<std::uint32_t>(c ? c->group_size() : 1, 1);
  ++g.arrived;
  if (!g.kept) {
    g.kept = std::make_unique<wire::SampleGroupT>();
    g.kept->group_id = group_id;
    g.kept->prompt_hash = c ? c->prompt_hash() : 0;
  }

  const bool excluded = s.excluded() && s.excluded()->size() > 0;
  // Every draw with a reward, a duplicate too: the trainer's baseline for the group (train.fbs).
  if (!excluded) g.kept->draw_rewards.push_back(s.reward());
  if (excluded) {
    ++counters_.excluded;
  } else if (c && is_duplicate(g, c->prompt_hash(), c->code_hash())) {
    ++counters_.duplicate;
  } else if (is_stale(version)) {
    ++counters_.stale;
  } else {
    g.oldest_version = std::min(g.oldest_version, version);
    g.kept->samples.emplace_back(s.UnPack());
  }

  if (g.arrived >= g.expected) {
    auto done = std::move(g);
    open_.erase(group_id);
    const auto kept = done.kept->samples.size();
    if (kept > 0 && is_stale(done.oldest_version)) {
      // The policy moved on while the group was open (set_policy_version checks only ready ones).
      counters_.stale += kept;
    } else if (kept >= 2 || (kept == 1 && opt_.serve_single_with_draws && draws_differ(*done.kept))) {
      ready_.push_back(std::move(done));
    } else {
      ++counters_.groups_too_small;
      counters_.small_group += done.kept->samples.size();
    }
  }
  return take_batches();
}

void sample_buffer::set_policy_version(std::uint64_t v) {
  policy_version_ = std::max(policy_version_, v);
  for (auto it = ready_.begin(); it != ready_.end();) {
    if (is_stale(it->oldest_version)) {
      counters_.stale += it->kept->samples.size();
      it = ready_.erase(it);
    } else {
      ++it;
    }
  }
}

std::uint64_t sample_buffer::pending() const noexcept {
  std::uint64_t n = 0;
  for (const auto& [id, g] : open_) n += g.kept ? g.kept->samples.size() : 0;
  for (const auto& g : ready_) n += g.kept->samples.size();
  return n;
}

bool sample_buffer::accounted() const noexcept {
  const auto& c = counters_;
  return c.received ==
         c.duplicate + c.stale + c.excluded + c.small_group + c.served + pending();
}

std::vector<wire::TrainBatchT> sample_buffer::take_batches() {
  std::vector<wire::TrainBatchT> out;
  const auto per_batch = static_cast<std::size_t>(std::max(opt_.groups_per_batch, 1));
  while (ready_.size() >= per_batch) {
    wire::TrainBatchT b;
    b.step = counters_.batches++;
    for (std::size_t i = 0; i < per_batch; ++i) {
      counters_.served += ready_.front().kept->samples.size();
      b.groups.push_back(std::move(ready_.front().kept));
      ready_.pop_front();
      ++counters_.groups_served;
    }
    out.push_back(std::move(b));
  }
  return out;
}

}  // namespace kforge::pipeline

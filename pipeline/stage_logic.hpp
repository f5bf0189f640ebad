#pragma once
// The real reward and buffer logic (reward.hpp, sample_buffer.hpp) behind the actors' interfaces.

#include <memory>

#include "actors/stage_logic.hpp"
#include "pipeline/reward.hpp"
#include "pipeline/sample_buffer.hpp"

namespace kforge::pipeline {

class reward_stage final : public actors::reward_logic {
 public:
  explicit reward_stage(reward_options o) : model_(o) {}
  result<std::optional<wire::ScoredT>> score(const wire::Verdict& v,
                                             const actors::envelope_info& info) override {
    return std::optional<wire::ScoredT>(model_.score(v, info.policy_version));
  }
  const reward_model& model() const noexcept { return model_; }

 private:
  reward_model model_;
};

class buffer_stage final : public actors::buffer_logic {
 public:
  explicit buffer_stage(buffer_options o) : buffer_(o) {}
  result<actors::buffer_output> push(const wire::Scored& s,
                                     const actors::envelope_info& info) override {
    const auto before = dropped();
    actors::buffer_output out;
    out.batches = buffer_.add(s, info.policy_version);
    out.dropped = dropped() - before;
    return out;
  }
  std::uint64_t set_policy_version(std::uint64_t v) override {
    const auto before = dropped();
    buffer_.set_policy_version(v);
    return dropped() - before;
  }
  std::uint64_t pending() const override { return buffer_.pending(); }
  const sample_buffer& buffer() const noexcept { return buffer_; }

 private:
  std::uint64_t dropped() const noexcept {
    const auto& c = buffer_.counters();
    return c.duplicate + c.stale + c.excluded + c.small_group;
  }
  sample_buffer buffer_;
};

}  // namespace kforge::pipeline

#pragma once
// The samplers' half of episodes inside `kforge run` (agent/episode_turns.hpp). Each observation,
// a scored turn whose episode goes on, is rendered by the observation template, wrapped as the next
// user message of the checkpoint's chat format, cut to [agent] observation_max_tokens, and appended
// to the turn's context; the policy then continues all of them in one batch. A turn the policy
// cannot generate ends its episode with an empty turn, so its group still completes. A turn's random
// numbers are seeded from (run seed, the observed sample's id, the turn), so a rerun gives the same
// turns. Torch-free: it drives the engine through engine_policy.

#include <cstdint>
#include <memory>
#include <vector>

#include "actors/logic_interfaces.hpp"
#include "agent/episode_turns.hpp"
#include "agent/observation.hpp"
#include "common/result.hpp"
#include "config/options/agent_options.hpp"
#include "config/options/sampler_options.hpp"
#include "stages/engine_sampler.hpp"

namespace kforge::pipeline {

class episode_turn_sampler {
 public:
  /// The template ([agent] observation_template, or the embedded one) and feedback kinds checked;
  /// an error names the key and what is wrong.
  static result<episode_turn_sampler> make(const agent_options& agent, const sampler_options& sampling,
                                           std::uint64_t run_seed);

  /// The next turn of each observed episode, in order.
  std::vector<result<wire::CandidateT>> next_turns(engine_policy& policy,
                                                   const std::vector<actors::sampler_logic::turn_item>& turns) const;

  /// Observations rendered and appended to their episodes' ids, ready for the policy: the
  /// contexts to continue (one each, with its seed) and the turns that failed already.
  struct pending_turns {
    std::vector<result<wire::CandidateT>> out;  ///< one per observation; errors so far
    std::vector<std::unique_ptr<wire::ScoredT>> observed;
    std::vector<agent::next_turn> next;
    std::vector<std::size_t> index;  ///< the observations whose context goes to the policy
    std::vector<std::vector<std::int32_t>> contexts;
    std::vector<std::uint64_t> seeds;
  };
  /// next_turns in parts, for a sampler that generates the contexts in a batch of its own (with
  /// new groups, say): prepare, continue every context at sampling()'s settings, then finish with
  /// one continuation (or error) per context.
  pending_turns prepare(const engine_policy& policy, const std::vector<actors::sampler_logic::turn_item>& turns) const;
  std::vector<result<wire::CandidateT>> finish(pending_turns p,
                                               std::vector<result<engine_policy::continuation>> gens) const;
  /// A continuation of each context; the batch at once, or in halves when it fails.
  std::vector<result<engine_policy::continuation>> continue_all(
      engine_policy& policy, const std::vector<std::vector<std::int32_t>>& contexts,
      const std::vector<std::uint64_t>& seeds) const;
  /// The settings turns are sampled at: [sampler]'s temperature, top_p and max_new_tokens.
  const sampler_options& sampling() const { return sampling_; }

 private:
  /// The observation's ids as a user message after `previous`, at most observation_max_tokens.
  std::vector<std::int32_t> observation_ids(const engine_policy& policy, const std::string& text,
                                            const std::vector<std::int32_t>& previous) const;
  void continue_range(engine_policy& policy, const std::vector<std::vector<std::int32_t>>& contexts,
                      const std::vector<std::uint64_t>& seeds, std::size_t begin, std::size_t end,
                      std::vector<result<engine_policy::continuation>>& out) const;

  episode_turn_sampler(agent::observation_template t, agent::feedback_kinds k, agent_options a,
                       sampler_options s, std::uint64_t seed)
      : template_(std::move(t)), kinds_(k), agent_(std::move(a)), sampling_(std::move(s)), seed_(seed) {}

  agent::observation_template template_;
  agent::feedback_kinds kinds_;
  agent_options agent_;
  sampler_options sampling_;
  std::uint64_t seed_;
  mutable bool told_failure_ = false;  ///< the first failed turn is said on the log
  mutable bool told_split_ = false;    ///< the first failed batch of turns is said on the log
};

}  // namespace kforge::pipeline

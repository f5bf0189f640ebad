#pragma once
// Episodes inside `kforge run`: what the reward and the samplers decide about a turn, on the
// messages themselves. An episode's state travels in its candidates (wire::Episode): the context
// the turn was generated from, which of those tokens the model wrote and their log-probs, and the
// earlier turns' rewards. So any sampler can generate the next turn, nothing is held between
// turns, and the recordings of the links hold whole episodes.
//
// The reward scores every turn with its usual formula. Then the turn either goes on (its scored
// sample travels to a sampler, whose observation of it starts the next turn) or ends the episode
// (its sample becomes the episode's: the reward over all turns, the loss over every turn's tokens).
// A single-shot candidate carries no episode and passes through all of this unchanged.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "agent/episode.hpp"
#include "agent/observation.hpp"
#include "common/result.hpp"
#include "config/options/agent_options.hpp"
#include "messages/rollout_generated.h"

namespace kforge::agent {

/// The manifest's [agent] rules of an episode.
struct episode_rules {
  int max_turns = 1;
  /// > 0: a correct kernel at least this many times faster than the baseline ends the episode.
  double target_speedup = 0;
  /// > 0: no further turn once the context (prompt and turns so far) holds this many tokens.
  std::size_t max_tokens = 0;
  episode_reward reward = episode_reward::best;
  double discount = 0.4;
};

/// The rules of the manifest's [agent] table.
episode_rules rules_of(const agent_options& o);

/// Whether the episode of scored turn `s` goes on: it has one, this is not its last turn, the turn
/// was not excluded (an infra error ends the episode: it says nothing about the kernel), no correct
/// kernel reached target_speedup, and its context and completion are under max_tokens.
bool goes_on(const wire::ScoredT& s, const episode_rules& r);

/// Makes the last turn's scored sample the episode's: its reward is reward_over_turns() of every
/// turn's, its policy_version the first turn's (the episode is as old as its oldest tokens); under
/// turn_returns its episode also carries every turn's return (Episode.turn_returns) for the
/// trainer. Nothing for a single-shot sample.
void finish_episode(wire::ScoredT& s, const episode_rules& r);

/// The episode state of a first turn generated from `prompt_size` prompt tokens; null (single
/// shot) when max_turns <= 1. `request`, where given, lends the episode its GPU facts.
std::unique_ptr<wire::EpisodeT> first_turn(std::size_t prompt_size, int max_turns,
                                           std::uint64_t policy_version,
                                           const wire::GenerateRequest* request = nullptr);

/// Where the scored turn stands, for its observation: turn, max_turns and the best speedup of the
/// earlier turns.
turn_context observed_turn(const wire::ScoredT& s);

/// The next turn of a turn that goes on: the ids to generate from (the turn's context, its
/// completion, then the observation's ids) and the new candidate's episode state.
struct next_turn {
  std::vector<std::int32_t> context;
  wire::EpisodeT episode;
};

/// An error when `observed` carries no episode or its episode state does not match its tokens.
result<next_turn> prepare_next_turn(const wire::ScoredT& observed, const std::vector<std::int32_t>& observation);

/// The next turn's candidate: the model's continuation (tokens, their log-probs, its text and the
/// source taken from it) of the prepared context, in the observed turn's task and group.
wire::CandidateT next_turn_candidate(const wire::ScoredT& observed, next_turn next,
                                     std::vector<std::int32_t> tokens, std::vector<float> logprobs,
                                     std::string completion, std::string source);

/// The turn that ends an episode whose next turn could not be generated (its context no longer
/// fits, the policy failed): no completion, and marked as the last turn, so the sandbox rejects it
/// at once, the reward ends the episode with it, and the group it belongs to still completes.
wire::CandidateT ended_turn_candidate(const wire::ScoredT& observed, next_turn next);

}  // namespace kforge::agent

#pragma once
// The trainer's plain view of a TrainBatch message (messages/train.fbs): what policy_trainer::step
// takes, built from the message by stages/train_batch_of.hpp. No LibTorch here, so the conversion
// is tested without it.

#include <cstdint>
#include <string>
#include <vector>

namespace kforge::trainer {

/// One scored completion; mirrors messages/train.fbs SampleGroup.samples (Scored -> Verdict ->
/// Candidate).
struct train_sample {
  std::vector<std::int64_t> prompt_tokens;      ///< Candidate.prompt_tokens (>= 1 token)
  std::vector<std::int64_t> completion_tokens;  ///< Candidate.completion_tokens
  std::vector<float> logprobs;                  ///< Candidate.logprobs: behaviour policy, one per
                                                ///< completion token; empty: unknown
  /// One per completion token: 1 where the model wrote it (the loss covers it), 0 where it is an
  /// observation inside an episode. Empty: every completion token is the model's.
  std::vector<std::uint8_t> completion_mask;
  double reward = 0;                            ///< Scored.reward
  std::uint64_t policy_version = 0;             ///< Scored.policy_version: the weights that sampled it
  std::string excluded;                         ///< Scored.excluded: non-empty = never trained on
  /// Episode.turn_returns: one per turn under [agent] reward = "turn_returns", each turn's tokens
  /// trained with its own return (split_by_turn); empty: the reward for every token.
  std::vector<double> turn_returns;
};

/// The completions of one prompt; mirrors SampleGroup.
struct sample_group {
  std::uint64_t prompt_hash = 0;
  std::uint64_t group_id = 0;
  std::vector<train_sample> samples;
  /// SampleGroup.draw_rewards: every reward the policy's draws for the group got, the duplicates
  /// the buffer dropped included; empty where the batch does not carry them.
  std::vector<double> draw_rewards;
};

/// Mirrors TrainBatch.
struct train_batch {
  std::uint64_t step = 0;
  std::vector<sample_group> groups;
};

}  // namespace kforge::trainer

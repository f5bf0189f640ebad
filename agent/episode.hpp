#pragma once
// One episode: a task worked over several turns. Turn 1 answers the prompt; after each turn the
// sandbox's verdict becomes an observation (observation.hpp) appended to the conversation, and the
// model answers again. The episode keeps token ids, never text: each turn appends the model's own
// tokens, then the observation's, so the trainer sees exactly the tokens that were sampled, and
// the loss mask covers the model's tokens only (the prompt and the observations get no gradient).
//
// It ends after max_turns, when a correct kernel reaches target_speedup, or when the next turn
// would start past max_tokens. Its reward is the best turn's, the last turn's, or the turns'
// rewards summed with a discount (turn k weighs discount^(k-1)); with max_turns = 1 every choice is
// the one turn's reward, exactly the single-shot reward. "turn_returns" ranks episodes as
// "discounted" does, and in training credits each turn's tokens with that turn's own return (its
// reward plus the discounted rewards of the turns after it; returns_over_turns), so a turn that
// breaks a correct kernel is not paid for the turn before it.
//
// Plain logic, no model or sandbox: the caller generates, judges, scores and tokenizes, and tells
// the episode in the order add_completion, score, then (unless done) observe.

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.hpp"
#include "config/options/agent_options.hpp"

namespace kforge::agent {

/// The manifest's [agent] reward kinds (config/options/agent_options.hpp), by this name here.
using episode_reward = kforge::episode_reward_kind;

/// An episode's reward from its turns' rewards, in order: the best, the last, or their sum with
/// turn k weighed discount^(k-1) (discounted and turn_returns: the first turn's return). 0 for no
/// turn.
double reward_over_turns(const std::vector<double>& rewards, episode_reward kind, double discount);

/// Each turn's return, in order: G_k = r_k + discount * G_(k+1), the last turn's its reward.
std::vector<double> returns_over_turns(const std::vector<double>& rewards, double discount);

struct episode_options {
  int max_turns = 1;
  /// > 0: a correct kernel at least this many times faster than the baseline ends the episode.
  double target_speedup = 0;
  /// > 0: no further turn once the context (prompt, completions, observations) holds this many tokens.
  std::size_t max_tokens = 0;
  episode_reward reward = episode_reward::best;
  double discount = 0.4;  ///< for episode_reward::discounted and turn_returns
};

/// One turn: what the model wrote and what came of it.
struct episode_turn {
  std::vector<std::int32_t> completion;
  std::vector<float> logprobs;            ///< the behaviour policy's, one per completion token
  std::vector<std::int32_t> observation;  ///< appended after the completion; empty after the last turn
  double reward = 0;
  bool correct = false;
  double speedup = 0;  ///< over the baseline, for a correct kernel
};

class episode {
 public:
  episode(std::vector<std::int32_t> prompt, episode_options o);

  /// The ids the next turn is generated from: the prompt, then every turn's completion and
  /// observation, in order.
  const std::vector<std::int32_t>& context() const noexcept { return context_; }
  std::size_t prompt_size() const noexcept { return prompt_size_; }
  const std::vector<episode_turn>& turns() const noexcept { return turns_; }
  /// The turn being worked: 1 for the first.
  int turn() const noexcept { return static_cast<int>(turns_.size()) + (expect_ == step::completion ? 1 : 0); }
  bool done() const noexcept { return expect_ == step::none; }
  /// Why it ended ("max_turns", "target_speedup", "max_tokens"); "" while it goes on.
  const std::string& ended_by() const noexcept { return ended_by_; }

  /// The model's answer to the current turn (logprobs one per token).
  status add_completion(std::vector<std::int32_t> tokens, std::vector<float> logprobs);
  /// The current turn's outcome: its reward (the reward stage's), whether the kernel was correct,
  /// its speedup. Ends the episode at max_turns or target_speedup.
  status score(double reward, bool correct, double speedup);
  /// The current turn's observation, appended to the context; ends the episode instead when the
  /// context would then exceed max_tokens.
  status observe(std::vector<std::int32_t> tokens);

  /// One entry per token of context(): 1 where the model wrote it (the loss covers it), 0 for the
  /// prompt and the observations.
  std::vector<std::uint8_t> loss_mask() const;
  /// The behaviour log-prob of each token of context(), 0 where loss_mask() is 0.
  std::vector<float> behaviour_logprobs() const;
  /// The episode's reward, by episode_options::reward.
  double reward() const;
  /// The best speedup of a correct turn so far (0: none).
  double best_speedup() const;

 private:
  enum class step { completion, score, observation, none };
  status out_of_order(const char* call) const;
  void end(const char* why) {
    expect_ = step::none;
    ended_by_ = why;
  }

  episode_options o_;
  std::vector<std::int32_t> context_;
  std::size_t prompt_size_;
  std::vector<episode_turn> turns_;
  step expect_ = step::completion;
  std::string ended_by_;
};

}  // namespace kforge::agent

#pragma once
// Settings of multi-turn episodes, from the manifest's [agent] table (docs/agent.md). With
// max_turns = 1 (the default) every task is answered in one turn, as single-shot RL always was.

#include <cstddef>
#include <string>
#include <vector>

namespace kforge {

/// The kinds of feedback an observation can show, as [agent] feedback names them.
inline const std::vector<std::string>& agent_feedback_kinds() {
  static const std::vector<std::string> kinds = {"compile", "resources", "correctness", "runtime", "timing", "profile"};
  return kinds;
}

enum class episode_reward_kind { best, last, discounted, turn_returns };

/// The manifest's name of an episode reward.
inline const char* episode_reward_name(episode_reward_kind k) {
  switch (k) {
    case episode_reward_kind::best: return "best";
    case episode_reward_kind::last: return "last";
    case episode_reward_kind::discounted: return "discounted";
    case episode_reward_kind::turn_returns: return "turn_returns";
  }
  return "?";
}

struct agent_options {
  /// Turns an episode may take; 1: single shot. In [1, 16].
  int max_turns = 1;
  /// > 0: a correct kernel at least this many times faster than the baseline ends its episode.
  double target_speedup = 0;
  /// > 0: no further turn once an episode's context (prompt, turns, observations) holds this
  /// many tokens.
  std::size_t max_tokens = 0;
  /// The most tokens an observation adds to the context; a longer one is cut at its end.
  std::size_t observation_max_tokens = 512;
  /// What a GRPO group ranks episodes by: the best turn's reward, the last turn's, or every turn's
  /// summed with weight discount^(turn - 1); turn_returns: as discounted, and the trainer credits
  /// each turn's tokens with that turn's own return (agent/episode.hpp).
  episode_reward_kind reward = episode_reward_kind::best;
  /// For reward = "discounted" and "turn_returns". In [0, 1].
  double discount = 0.4;
  /// Which kinds of feedback the observations show (agent/observation.hpp): compile, resources,
  /// correctness, runtime, timing, profile. Empty: all of them.
  std::vector<std::string> feedback;
  /// The observation template's file; empty: the embedded one (agent/observation_template.txt).
  std::string observation_template;
};

}  // namespace kforge

#include "agent/episode.hpp"

#include <algorithm>
#include <cmath>

namespace kforge::agent {

episode::episode(std::vector<std::int32_t> prompt, episode_options o)
    : o_(o), context_(std::move(prompt)), prompt_size_(context_.size()) {
  if (o_.max_turns < 1) o_.max_turns = 1;
}

status episode::out_of_order(const char* call) const {
  static const char* const expected[] = {"add_completion", "score", "observe", "nothing (it has ended)"};
  return error{std::string("episode: ") + call + " out of order: it expects " +
               expected[static_cast<int>(expect_)]};
}

status episode::add_completion(std::vector<std::int32_t> tokens, std::vector<float> logprobs) {
  if (expect_ != step::completion) return out_of_order("add_completion");
  if (tokens.size() != logprobs.size())
    return error{"episode: " + std::to_string(tokens.size()) + " completion tokens but " +
                 std::to_string(logprobs.size()) + " log-probs"};
  context_.insert(context_.end(), tokens.begin(), tokens.end());
  episode_turn t;
  t.completion = std::move(tokens);
  t.logprobs = std::move(logprobs);
  turns_.push_back(std::move(t));
  expect_ = step::score;
  return {};
}

status episode::score(double reward, bool correct, double speedup) {
  if (expect_ != step::score) return out_of_order("score");
  auto& t = turns_.back();
  t.reward = reward;
  t.correct = correct;
  t.speedup = correct ? speedup : 0;
  if (correct && o_.target_speedup > 0 && speedup >= o_.target_speedup) end("target_speedup");
  else if (static_cast<int>(turns_.size()) >= o_.max_turns) end("max_turns");
  else expect_ = step::observation;
  return {};
}

status episode::observe(std::vector<std::int32_t> tokens) {
  if (expect_ != step::observation) return out_of_order("observe");
  if (o_.max_tokens > 0 && context_.size() + tokens.size() >= o_.max_tokens) {
    end("max_tokens");
    return {};
  }
  context_.insert(context_.end(), tokens.begin(), tokens.end());
  turns_.back().observation = std::move(tokens);
  expect_ = step::completion;
  return {};
}

std::vector<std::uint8_t> episode::loss_mask() const {
  std::vector<std::uint8_t> mask(prompt_size_, 0);
  mask.reserve(context_.size());
  for (const auto& t : turns_) {
    mask.insert(mask.end(), t.completion.size(), 1);
    mask.insert(mask.end(), t.observation.size(), 0);
  }
  return mask;
}

std::vector<float> episode::behaviour_logprobs() const {
  std::vector<float> lp(prompt_size_, 0.f);
  lp.reserve(context_.size());
  for (const auto& t : turns_) {
    lp.insert(lp.end(), t.logprobs.begin(), t.logprobs.end());
    lp.insert(lp.end(), t.observation.size(), 0.f);
  }
  return lp;
}

double reward_over_turns(const std::vector<double>& rewards, episode_reward kind, double discount) {
  if (rewards.empty()) return 0;
  switch (kind) {
    case episode_reward::best:
      return *std::max_element(rewards.begin(), rewards.end());
    case episode_reward::last:
      return rewards.back();
    case episode_reward::discounted:
    case episode_reward::turn_returns: {
      double sum = 0, weight = 1;
      for (const double r : rewards) {
        sum += weight * r;
        weight *= discount;
      }
      return sum;
    }
  }
  return 0;
}

std::vector<double> returns_over_turns(const std::vector<double>& rewards, double discount) {
  std::vector<double> g(rewards.size());
  double later = 0;
  for (std::size_t k = rewards.size(); k-- > 0;) {
    g[k] = rewards[k] + discount * later;
    later = g[k];
  }
  return g;
}

double episode::reward() const {
  std::vector<double> rewards;
  for (const auto& t : turns_) rewards.push_back(t.reward);
  return reward_over_turns(rewards, o_.reward, o_.discount);
}

double episode::best_speedup() const {
  double best = 0;
  for (const auto& t : turns_)
    if (t.correct) best = std::max(best, t.speedup);
  return best;
}

}  // namespace kforge::agent

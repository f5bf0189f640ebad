#include "agent/episode_turns.hpp"

#include <algorithm>
#include <utility>

#include "common/hash.hpp"
#include "sandbox/verdict_encoding.hpp"

namespace kforge::agent {

namespace {

const wire::CandidateT* candidate_of(const wire::ScoredT& s) {
  return s.verdict && s.verdict->candidate ? s.verdict->candidate.get() : nullptr;
}

const wire::EpisodeT* episode_of(const wire::ScoredT& s) {
  const auto* c = candidate_of(s);
  return c && c->episode ? c->episode.get() : nullptr;
}

bool correct(const wire::ScoredT& s) {
  return s.verdict && s.verdict->status == wire::VerdictStatus::ok && s.excluded.empty();
}

}  // namespace

episode_rules rules_of(const agent_options& o) {
  episode_rules r;
  r.max_turns = o.max_turns;
  r.target_speedup = o.target_speedup;
  r.max_tokens = o.max_tokens;
  r.reward = o.reward;
  r.discount = o.discount;
  return r;
}

bool goes_on(const wire::ScoredT& s, const episode_rules& r) {
  const auto* e = episode_of(s);
  if (!e || e->turn >= e->max_turns || !s.excluded.empty()) return false;
  if (r.target_speedup > 0 && correct(s) && s.speedup >= r.target_speedup) return false;
  const auto* c = candidate_of(s);
  return r.max_tokens == 0 || c->prompt_tokens.size() + c->completion_tokens.size() < r.max_tokens;
}

void finish_episode(wire::ScoredT& s, const episode_rules& r) {
  auto* e = s.verdict && s.verdict->candidate ? s.verdict->candidate->episode.get() : nullptr;
  if (!e) return;
  std::vector<double> rewards = e->turn_rewards;
  rewards.push_back(s.reward);
  s.reward = reward_over_turns(rewards, r.reward, r.discount);
  if (r.reward == episode_reward::turn_returns) e->turn_returns = returns_over_turns(rewards, r.discount);
  s.policy_version = std::min(s.policy_version, e->first_policy_version);
}

std::unique_ptr<wire::EpisodeT> first_turn(std::size_t prompt_size, int max_turns,
                                           std::uint64_t policy_version, const wire::GenerateRequest* request) {
  if (max_turns <= 1) return nullptr;
  auto e = std::make_unique<wire::EpisodeT>();
  e->turn = 1;
  e->max_turns = static_cast<std::uint32_t>(max_turns);
  e->prompt_size = static_cast<std::uint32_t>(prompt_size);
  e->context_mask.assign(prompt_size, 0);
  e->context_logprobs.assign(prompt_size, 0.0f);
  e->first_policy_version = policy_version;
  if (request) {
    e->gpu_registers_per_sm = request->gpu_registers_per_sm();
    e->gpu_shared_per_sm = request->gpu_shared_per_sm();
  }
  return e;
}

turn_context observed_turn(const wire::ScoredT& s) {
  turn_context t;
  if (const auto* e = episode_of(s)) {
    t.turn = static_cast<int>(e->turn);
    t.max_turns = static_cast<int>(e->max_turns);
    for (const double x : e->turn_speedups) t.best_speedup = std::max(t.best_speedup, x);
    t.gpu.registers_per_sm = static_cast<int>(e->gpu_registers_per_sm);
    t.gpu.shared_per_sm = static_cast<std::int64_t>(e->gpu_shared_per_sm);
  }
  if (s.verdict) t.profile = sandbox::profile_of(*s.verdict);
  return t;
}

result<next_turn> prepare_next_turn(const wire::ScoredT& observed, const std::vector<std::int32_t>& observation) {
  const auto* e = episode_of(observed);
  if (!e) return error{"the observed turn carries no episode"};
  const auto& c = *candidate_of(observed);
  const std::size_t context = c.prompt_tokens.size();
  if (e->context_mask.size() != context || e->context_logprobs.size() != context ||
      e->prompt_size > context || e->turn_rewards.size() + 1 != e->turn ||
      e->turn_speedups.size() + 1 != e->turn)
    return error{"turn " + std::to_string(e->turn) + "'s episode state does not match its " +
                 std::to_string(context) + " context tokens and " + std::to_string(e->turn - 1) +
                 " earlier turns"};
  if (c.logprobs.size() != c.completion_tokens.size())
    return error{"turn " + std::to_string(e->turn) + " has " + std::to_string(c.logprobs.size()) +
                 " log-probs for " + std::to_string(c.completion_tokens.size()) + " completion tokens"};
  next_turn n;
  n.context = c.prompt_tokens;
  n.context.insert(n.context.end(), c.completion_tokens.begin(), c.completion_tokens.end());
  n.context.insert(n.context.end(), observation.begin(), observation.end());
  n.episode = *e;
  n.episode.turn = e->turn + 1;
  n.episode.context_mask.insert(n.episode.context_mask.end(), c.completion_tokens.size(), 1);
  n.episode.context_mask.insert(n.episode.context_mask.end(), observation.size(), 0);
  n.episode.context_logprobs.insert(n.episode.context_logprobs.end(), c.logprobs.begin(), c.logprobs.end());
  n.episode.context_logprobs.insert(n.episode.context_logprobs.end(), observation.size(), 0.0f);
  n.episode.turn_rewards.push_back(observed.reward);
  n.episode.turn_speedups.push_back(correct(observed) ? observed.speedup : 0.0);
  return n;
}

wire::CandidateT next_turn_candidate(const wire::ScoredT& observed, next_turn next,
                                     std::vector<std::int32_t> tokens, std::vector<float> logprobs,
                                     std::string completion, std::string source) {
  const auto& was = *candidate_of(observed);
  wire::CandidateT c;
  c.task.reset(was.task ? new wire::TaskT(*was.task) : nullptr);
  c.prompt_hash = was.prompt_hash;
  c.group_id = was.group_id;
  c.group_index = was.group_index;
  c.group_size = was.group_size;
  c.code_hash = fnv1a64(source);
  c.source = std::move(source);
  c.completion = std::move(completion);
  c.prompt_tokens = std::move(next.context);
  c.completion_tokens = std::move(tokens);
  c.logprobs = std::move(logprobs);
  c.episode = std::make_unique<wire::EpisodeT>(std::move(next.episode));
  return c;
}

wire::CandidateT ended_turn_candidate(const wire::ScoredT& observed, next_turn next) {
  next.episode.turn = next.episode.max_turns;
  return next_turn_candidate(observed, std::move(next), {}, {}, "", "");
}

}  // namespace kforge::agent

// Episodes inside `kforge run`: the reward's and the samplers' decisions on the messages
// (agent/episode_turns.hpp).
#include <doctest/doctest.h>

#include <memory>
#include <vector>

#include "agent/episode_turns.hpp"

using namespace kforge;
using agent::episode_rules;

namespace {

// A scored turn of `candidate`: the verdict's status, reward and speedup.
wire::ScoredT scored(const wire::CandidateT& candidate, wire::VerdictStatus status, double reward,
                     double speedup = 0) {
  wire::ScoredT s;
  s.verdict = std::make_unique<wire::VerdictT>();
  s.verdict->candidate = std::make_unique<wire::CandidateT>(candidate);
  s.verdict->status = status;
  s.reward = reward;
  s.speedup = speedup;
  s.policy_version = 7;
  return s;
}

wire::CandidateT first(int max_turns) {
  wire::CandidateT c;
  c.prompt_tokens = {1, 2, 3};
  c.completion_tokens = {10, 11};
  c.logprobs = {-0.5f, -0.25f};
  c.group_id = 42;
  c.group_index = 3;
  c.group_size = 8;
  c.prompt_hash = 99;
  c.episode = agent::first_turn(3, max_turns, 5);
  return c;
}

}  // namespace

TEST_CASE("a single-shot sample passes through the episode rules unchanged") {
  episode_rules r;
  r.max_turns = 1;
  r.reward = agent::episode_reward::last;
  CHECK(agent::first_turn(3, 1, 0) == nullptr);
  auto s = scored(first(1), wire::VerdictStatus::ok, 0.75, 1.5);
  CHECK_FALSE(agent::goes_on(s, r));
  agent::finish_episode(s, r);
  CHECK(s.reward == 0.75);  // bit for bit
  CHECK(s.policy_version == 7);
}

TEST_CASE("an episode goes on until max_turns, the target speedup, max_tokens or an infra error") {
  episode_rules r;
  r.max_turns = 3;
  const auto c = first(3);
  CHECK(agent::goes_on(scored(c, wire::VerdictStatus::compile_error, 0), r));
  auto last = c;
  last.episode->turn = 3;
  CHECK_FALSE(agent::goes_on(scored(last, wire::VerdictStatus::compile_error, 0), r));
  r.target_speedup = 2;
  CHECK(agent::goes_on(scored(c, wire::VerdictStatus::ok, 0.6, 1.9), r));
  CHECK_FALSE(agent::goes_on(scored(c, wire::VerdictStatus::ok, 0.9, 2.0), r));
  r.max_tokens = 5;  // 3 context + 2 completion tokens
  CHECK_FALSE(agent::goes_on(scored(c, wire::VerdictStatus::compile_error, 0), r));
  r.max_tokens = 6;
  CHECK(agent::goes_on(scored(c, wire::VerdictStatus::compile_error, 0), r));
  auto infra = scored(c, wire::VerdictStatus::infra_error, 0);
  infra.excluded = "infra_error: GPU lost";
  CHECK_FALSE(agent::goes_on(infra, r));
}

TEST_CASE("an episode's context is its turns' ids in order; the mask marks the model's") {
  episode_rules r;
  r.max_turns = 3;
  const auto t1 = first(3);
  auto s1 = scored(t1, wire::VerdictStatus::compile_error, 0.0);
  auto n1 = agent::prepare_next_turn(s1, {20, 21, 22});
  REQUIRE(n1);
  auto t2 = agent::next_turn_candidate(s1, std::move(*n1), {12, 13}, {-1.0f, -2.0f}, "text", "src");
  CHECK(t2.prompt_tokens == std::vector<std::int32_t>{1, 2, 3, 10, 11, 20, 21, 22});
  CHECK(t2.completion_tokens == std::vector<std::int32_t>{12, 13});
  CHECK(t2.group_id == 42);
  CHECK(t2.group_index == 3);
  CHECK(t2.group_size == 8);
  CHECK(t2.prompt_hash == 99);
  CHECK(t2.source == "src");
  REQUIRE(t2.episode);
  CHECK(t2.episode->turn == 2);
  CHECK(t2.episode->context_mask == std::vector<std::uint8_t>{0, 0, 0, 1, 1, 0, 0, 0});
  CHECK(t2.episode->context_logprobs == std::vector<float>{0, 0, 0, -0.5f, -0.25f, 0, 0, 0});
  CHECK(t2.episode->turn_rewards == std::vector<double>{0.0});
  CHECK(t2.episode->turn_speedups == std::vector<double>{0.0});

  auto s2 = scored(t2, wire::VerdictStatus::ok, 0.6, 1.2);
  auto n2 = agent::prepare_next_turn(s2, {23});
  REQUIRE(n2);
  auto t3 = agent::next_turn_candidate(s2, std::move(*n2), {14}, {-3.0f}, "text", "src3");
  CHECK(t3.prompt_tokens == std::vector<std::int32_t>{1, 2, 3, 10, 11, 20, 21, 22, 12, 13, 23});
  CHECK(t3.episode->turn == 3);
  CHECK(t3.episode->turn_speedups == std::vector<double>{0.0, 1.2});
  CHECK(agent::observed_turn(scored(t3, wire::VerdictStatus::ok, 0.5, 1.1)).best_speedup == 1.2);

  // The last turn: the episode's reward over all three turns.
  auto s3 = scored(t3, wire::VerdictStatus::ok, 0.5, 1.1);
  CHECK_FALSE(agent::goes_on(s3, r));
  auto best = s3;
  agent::finish_episode(best, r);
  CHECK(best.reward == 0.6);
  CHECK(best.policy_version == 5);  // the first turn's
  r.reward = agent::episode_reward::last;
  auto last = s3;
  agent::finish_episode(last, r);
  CHECK(last.reward == 0.5);
  r.reward = agent::episode_reward::discounted;
  r.discount = 0.5;
  auto disc = s3;
  agent::finish_episode(disc, r);
  CHECK(disc.reward == doctest::Approx(0.0 + 0.5 * 0.6 + 0.25 * 0.5));
  CHECK(disc.verdict->candidate->episode->turn_returns.empty());  // only turn_returns sets them
  r.reward = agent::episode_reward::turn_returns;
  auto returns = s3;
  agent::finish_episode(returns, r);
  CHECK(returns.reward == disc.reward);
  const auto& g = returns.verdict->candidate->episode->turn_returns;
  REQUIRE(g.size() == 3);
  CHECK(g[2] == 0.5);
  CHECK(g[1] == doctest::Approx(0.6 + 0.5 * 0.5));
  CHECK(g[0] == doctest::Approx(returns.reward));
}

TEST_CASE("a turn whose episode state does not match its tokens is refused") {
  auto c = first(3);
  c.episode->context_mask.pop_back();
  CHECK_FALSE(agent::prepare_next_turn(scored(c, wire::VerdictStatus::ok, 1), {}));
  auto single = first(1);
  CHECK_FALSE(agent::prepare_next_turn(scored(single, wire::VerdictStatus::ok, 1), {}));
}

TEST_CASE("a turn that could not be generated ends its episode, with nothing to train on") {
  episode_rules r;
  r.max_turns = 3;
  auto s1 = scored(first(3), wire::VerdictStatus::compile_error, 0.0);
  auto n = agent::prepare_next_turn(s1, {20});
  REQUIRE(n);
  const auto ended = agent::ended_turn_candidate(s1, std::move(*n));
  CHECK(ended.episode->turn == 3);
  CHECK(ended.completion_tokens.empty());
  CHECK(ended.source.empty());
  CHECK(ended.prompt_tokens == std::vector<std::int32_t>{1, 2, 3, 10, 11, 20});
  CHECK_FALSE(agent::goes_on(scored(ended, wire::VerdictStatus::rejected, 0.0), r));
}

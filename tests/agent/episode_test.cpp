// agent/episode.hpp: the token bookkeeping, the loss mask, how an episode ends and its reward.

#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "agent/episode.hpp"

using namespace kforge::agent;
using ids = std::vector<std::int32_t>;

namespace {

std::vector<float> lps(std::size_t n, float v) { return std::vector<float>(n, v); }

}  // namespace

TEST_CASE("an episode's ids are its prompt and its turns' completions and observations, in order") {
  episode_options o;
  o.max_turns = 3;
  episode e({1, 2, 3}, o);
  CHECK(e.turn() == 1);
  REQUIRE(e.add_completion({10, 11}, lps(2, -0.5f)).ok());
  REQUIRE(e.score(0.0, false, 0).ok());
  REQUIRE(e.observe({20, 21, 22}).ok());
  CHECK(e.turn() == 2);
  REQUIRE(e.add_completion({12}, lps(1, -0.25f)).ok());
  REQUIRE(e.score(0.5, true, 1.2).ok());
  REQUIRE(e.observe({23}).ok());
  REQUIRE(e.add_completion({13, 14, 15}, lps(3, -1.f)).ok());
  REQUIRE(e.score(0.7, true, 1.5).ok());
  CHECK(e.done());
  CHECK(e.ended_by() == "max_turns");
  CHECK(e.context() == ids{1, 2, 3, 10, 11, 20, 21, 22, 12, 23, 13, 14, 15});
  // The loss covers the model's tokens only; their behaviour log-probs line up with them.
  CHECK(e.loss_mask() == std::vector<std::uint8_t>{0, 0, 0, 1, 1, 0, 0, 0, 1, 0, 1, 1, 1});
  CHECK(e.behaviour_logprobs() ==
        std::vector<float>{0, 0, 0, -0.5f, -0.5f, 0, 0, 0, -0.25f, 0, -1.f, -1.f, -1.f});
  CHECK(e.best_speedup() == doctest::Approx(1.5));
}

TEST_CASE("an episode ends at the target speedup, or before a turn past its token budget") {
  episode_options o;
  o.max_turns = 5;
  o.target_speedup = 2.0;
  episode fast({1}, o);
  REQUIRE(fast.add_completion({2}, lps(1, 0)).ok());
  REQUIRE(fast.score(1.0, true, 2.5).ok());
  CHECK(fast.ended_by() == "target_speedup");
  CHECK_FALSE(fast.observe({3}).ok());  // nothing more once it has ended
  // A wrong kernel never meets the target, whatever speedup is passed.
  episode wrong({1}, o);
  REQUIRE(wrong.add_completion({2}, lps(1, 0)).ok());
  REQUIRE(wrong.score(0.0, false, 9.0).ok());
  CHECK_FALSE(wrong.done());
  o.target_speedup = 0;
  o.max_tokens = 6;
  episode long_one({1, 2}, o);
  REQUIRE(long_one.add_completion({3, 4}, lps(2, 0)).ok());
  REQUIRE(long_one.score(0.0, false, 0).ok());
  REQUIRE(long_one.observe({5, 6}).ok());  // 6 tokens would be the budget itself: ends here
  CHECK(long_one.ended_by() == "max_tokens");
  CHECK(long_one.context() == ids{1, 2, 3, 4});
}

TEST_CASE("calls out of order and mismatched log-probs are refused, and change nothing") {
  episode e({1}, {});
  CHECK_FALSE(e.score(1, true, 1).ok());
  CHECK_FALSE(e.add_completion({2, 3}, lps(1, 0)).ok());
  CHECK(e.context() == ids{1});
  REQUIRE(e.add_completion({2}, lps(1, 0)).ok());
  CHECK_FALSE(e.add_completion({3}, lps(1, 0)).ok());
  CHECK(e.context() == ids{1, 2});
}

TEST_CASE("episode rewards: best, last, discounted; one turn gives that turn's reward exactly") {
  const double rewards[] = {0.25, 0.75, 0.5};
  auto run = [&](episode_reward mode, int turns) {
    episode_options o;
    o.max_turns = turns;
    o.reward = mode;
    episode e({1}, o);
    for (int t = 0; t < turns; ++t) {
      REQUIRE(e.add_completion({2}, lps(1, 0)).ok());
      REQUIRE(e.score(rewards[t], rewards[t] > 0.3, 1.0).ok());
      if (!e.done()) REQUIRE(e.observe({3}).ok());
    }
    return e.reward();
  };
  CHECK(run(episode_reward::best, 3) == 0.75);
  CHECK(run(episode_reward::last, 3) == 0.5);
  CHECK(run(episode_reward::discounted, 3) == doctest::Approx(0.25 + 0.4 * 0.75 + 0.16 * 0.5));
  CHECK(run(episode_reward::turn_returns, 3) == run(episode_reward::discounted, 3));  // ranks the same
  // Single-shot: bit for bit the turn's own reward, whatever the mode.
  for (auto mode : {episode_reward::best, episode_reward::last, episode_reward::discounted, episode_reward::turn_returns})
    CHECK(run(mode, 1) == 0.25);
}

TEST_CASE("turn returns: each turn's reward plus the discounted return of the turns after it") {
  const auto g = returns_over_turns({0.25, 0.75, 0.5}, 0.4);
  REQUIRE(g.size() == 3);
  CHECK(g[2] == 0.5);
  CHECK(g[1] == doctest::Approx(0.75 + 0.4 * 0.5));
  CHECK(g[0] == doctest::Approx(0.25 + 0.4 * 0.75 + 0.16 * 0.5));
  CHECK(g[0] == doctest::Approx(reward_over_turns({0.25, 0.75, 0.5}, episode_reward::discounted, 0.4)));
  // A correct first turn broken by the second: the broken turn's return is below the first's.
  const auto broke = returns_over_turns({1.0, 0.0}, 0.4);
  CHECK(broke[0] == doctest::Approx(1.0));
  CHECK(broke[1] == 0.0);
  CHECK(returns_over_turns({0.3}, 0.4) == std::vector<double>{0.3});  // one turn: its reward exactly
  CHECK(returns_over_turns({}, 0.4).empty());
}

// The curriculum: uniform sampling covers every task, curriculum sampling prefers tasks solved
// about half the time, both are deterministic for a seed, and the state survives a checkpoint.
#include <doctest/doctest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "tasks/curriculum.hpp"

using namespace kforge::tasks;

namespace {

std::vector<std::string> ids(std::size_t n) {
  std::vector<std::string> v;
  for (std::size_t i = 0; i < n; ++i) v.push_back("t/" + std::to_string(i));
  return v;
}

curriculum make(std::size_t n, sampling_mode mode, std::uint64_t seed = 7) {
  curriculum_options o;
  o.mode = mode;
  o.window = 10;
  auto c = curriculum::create(ids(n), o, seed);
  REQUIRE_MESSAGE(c.ok(), (c.ok() ? "" : c.message()));
  return std::move(c).value();
}

/// Task 0 always fails, 1 passes half the time, 2 always passes.
void feed_three(curriculum& c) {
  for (int k = 0; k < 10; ++k) {
    REQUIRE(c.observe("t/0", false, 0.0).ok());
    REQUIRE(c.observe("t/1", k % 2 == 0, k % 2 == 0 ? 1.0 : 0.0).ok());
    REQUIRE(c.observe("t/2", true, 1.2).ok());
  }
}

}  // namespace

TEST_CASE("uniform sampling covers every task, and a batch has no repeats") {
  auto c = make(20, sampling_mode::uniform);
  const auto batch = c.sample(20);
  CHECK(std::set<std::size_t>(batch.begin(), batch.end()).size() == 20);

  std::map<std::size_t, int> counts;
  for (int k = 0; k < 4000; ++k) ++counts[c.sample()];
  REQUIRE(counts.size() == 20);
  for (const auto& [i, n] : counts) {
    CHECK(n > 120);  // expected 200 each
    CHECK(n < 280);
  }
  // Results do not change uniform weights.
  feed_three(c);
  CHECK(c.weight(0) == c.weight(1));
}

TEST_CASE("more requests than tasks: each round covers all tasks, then it repeats") {
  auto c = make(3, sampling_mode::curriculum);
  const auto batch = c.sample(7);
  REQUIRE(batch.size() == 7);
  CHECK(std::set<std::size_t>(batch.begin(), batch.begin() + 3).size() == 3);
  CHECK(std::set<std::size_t>(batch.begin() + 3, batch.begin() + 6).size() == 3);
}

TEST_CASE("stats are over a sliding window of the last K results") {
  auto c = make(3, sampling_mode::curriculum);
  feed_three(c);
  CHECK(c.stats(1).pass_rate == doctest::Approx(0.5));
  CHECK(c.stats(1).mean_reward == doctest::Approx(0.5));
  CHECK(c.stats(2).pass_rate == 1.0);
  CHECK(c.stats(2).mean_reward == doctest::Approx(1.2));
  // Ten more passes push every failure out of task 0's window of 10.
  for (int k = 0; k < 10; ++k) REQUIRE(c.observe("t/0", true, 0.8).ok());
  CHECK(c.stats(0).window == 10);
  CHECK(c.stats(0).total == 20);
  CHECK(c.stats(0).pass_rate == 1.0);
  CHECK(c.stats(0).mean_reward == doctest::Approx(0.8));

  auto bad = c.observe("t/missing", true, 1.0);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.message() == "curriculum: result for unknown task 't/missing'");
}

TEST_CASE("curriculum sampling prefers ~50% tasks over 0% and 100% ones; unseen ones first") {
  auto c = make(4, sampling_mode::curriculum);
  feed_three(c);  // t/3 stays unseen
  CHECK(c.weight(1) > c.weight(0));
  CHECK(c.weight(1) > c.weight(2));
  CHECK(c.weight(0) > 0);  // the floor keeps them in play
  CHECK(c.weight(3) > c.weight(1));

  std::map<std::size_t, int> counts;
  for (int k = 0; k < 6000; ++k) ++counts[c.sample()];
  CHECK(counts[1] > 4 * counts[0]);
  CHECK(counts[1] > 4 * counts[2]);
  CHECK(counts[3] > counts[1]);
  CHECK(counts[0] > 0);
  CHECK(counts[2] > 0);
}

TEST_CASE("sampling is deterministic for a seed, and differs across seeds") {
  auto a = make(50, sampling_mode::curriculum, 42);
  auto b = make(50, sampling_mode::curriculum, 42);
  auto d = make(50, sampling_mode::curriculum, 43);
  feed_three(a);
  feed_three(b);
  feed_three(d);
  const auto sa = a.sample(200), sb = b.sample(200), sd = d.sample(200);
  CHECK(sa == sb);
  CHECK(sa != sd);
}

TEST_CASE("the state survives to_json/from_json, generator included") {
  auto a = make(5, sampling_mode::curriculum, 3);
  feed_three(a);
  (void)a.sample(4);
  auto b = curriculum::from_json(a.to_json());
  REQUIRE_MESSAGE(b.ok(), (b.ok() ? "" : b.message()));
  CHECK(b->to_json() == a.to_json());
  CHECK(b->size() == 5);
  CHECK(b->stats(1).pass_rate == doctest::Approx(0.5));
  CHECK(b->options().window == 10);
  CHECK(a.sample(50) == b->sample(50));
}

TEST_CASE("bad options and bad state are errors naming the field") {
  curriculum_options o;
  o.window = 0;
  auto c = curriculum::create(ids(2), o, 0);
  REQUIRE_FALSE(c.ok());
  CHECK(c.message() == "curriculum options: window: must be >= 1, got 0");

  auto dup = curriculum::create({"a", "a"}, curriculum_options{}, 0);
  REQUIRE_FALSE(dup.ok());
  CHECK(dup.message() == "curriculum: task 'a' is already in the pool");

  CHECK(parse_sampling_mode("curriculum") == sampling_mode::curriculum);
  CHECK(parse_sampling_mode("uniform") == sampling_mode::uniform);
  CHECK_FALSE(parse_sampling_mode("greedy").has_value());

  CHECK(curriculum::from_json("{").message() == "curriculum state: not valid JSON");
  auto good = make(2, sampling_mode::uniform);
  REQUIRE(good.observe("t/1", true, 1.0).ok());
  std::string text = good.to_json();
  const auto at = text.find("[true,1.0]");
  REQUIRE(at != std::string::npos);
  text.replace(at, 10, "[1,1.0]");
  auto bad = curriculum::from_json(text);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.message() ==
        "curriculum state: tasks[1].results[0]: expected [passed (bool), reward (finite number)]");
}

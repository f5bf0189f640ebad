#include <doctest/doctest.h>

#include "pipeline/reward.hpp"
#include "stage_fixtures.hpp"

using namespace kforge;
using kforge::test::verdict;
using wire::VerdictStatus;

namespace {
wire::ScoredT score(pipeline::reward_model& m, const messages::envelope& e, std::uint64_t v = 0) {
  return m.score(*e.as<wire::Verdict>(), v);
}
}  // namespace

TEST_CASE("reward follows the formula of ARCHITECTURE.md") {
  pipeline::reward_model m(reward_options{});
  // Wrong answers and compile errors earn nothing.
  CHECK(score(m, verdict("a", VerdictStatus::wrong_answer, 1, 1)).reward == 0);
  CHECK(score(m, verdict("a", VerdictStatus::compile_error, 0, 0)).reward == 0);
  // Equal speed: 0.5 + 0.5 * 1 = 1. Twice as fast: 0.5 + 0.5 * clamp(1 + 2 * 1) = 1.5 (clamped).
  auto same = score(m, verdict("a", VerdictStatus::ok, 2.0, 2.0));
  CHECK(same.reward == doctest::Approx(1.0));
  CHECK(same.speedup == doctest::Approx(1.0));
  CHECK(same.baseline_kind == wire::BaselineKind::reference_eager);
  CHECK(score(m, verdict("a", VerdictStatus::ok, 1.0, 2.0)).reward == doctest::Approx(1.5));
  // 1.25x faster: 0.5 + 0.5 * (1 + 2 * 0.25) = 1.25. Half speed: 0.5 + 0.5 * clamp(0) = 0.5.
  CHECK(score(m, verdict("a", VerdictStatus::ok, 1.6, 2.0)).reward == doctest::Approx(1.25));
  CHECK(score(m, verdict("a", VerdictStatus::ok, 4.0, 2.0)).reward == doctest::Approx(0.5));
  // Alpha and weights come from the options.
  reward_options o;
  o.alpha = 1;
  o.correctness_weight = 1;
  o.speed_weight = 0;
  pipeline::reward_model plain(o);
  CHECK(score(plain, verdict("a", VerdictStatus::ok, 1.0, 2.0)).reward == doctest::Approx(1.0));
}

TEST_CASE("infra errors are excluded, never rewarded") {
  pipeline::reward_model m(reward_options{});
  auto s = score(m, verdict("a", VerdictStatus::infra_error, 0, 0));
  CHECK(s.excluded.find("infra_error") != std::string::npos);
  CHECK(s.excluded.find("GPU lost") != std::string::npos);
  CHECK(m.excluded() == 1);
  CHECK(m.scored() == 0);
}

TEST_CASE("the baseline switches to the best kernel once the median speedup passes 2x") {
  reward_options o;
  o.baseline_check_every = 15;
  pipeline::reward_model m(o);
  // Version 0: three kernels at 3x, 4x and 2.5x over a 10 ms reference.
  for (double gen : {10.0 / 3, 2.5, 4.0}) CHECK(score(m, verdict("t", VerdictStatus::ok, gen, 10), 0).reward > 0);
  CHECK(m.switched_tasks() == 0);
  // Not yet time to check (every 15 versions).
  CHECK(score(m, verdict("t", VerdictStatus::ok, 2.5, 10), 14).baseline_kind ==
        wire::BaselineKind::reference_eager);
  // At version 15 the check runs: median 3x > 2x, so the baseline is now the best kernel, 2.5 ms.
  auto s = score(m, verdict("t", VerdictStatus::ok, 2.5, 10), 15);
  CHECK(m.switched_tasks() == 1);
  CHECK(s.baseline_kind == wire::BaselineKind::best_kernel);
  CHECK(s.baseline_ms == doctest::Approx(2.5));
  CHECK(s.reward == doctest::Approx(1.0));  // equal to the best: speed term 1
  // Another task keeps its own reference baseline.
  CHECK(score(m, verdict("u", VerdictStatus::ok, 5, 10), 15).baseline_kind ==
        wire::BaselineKind::reference_eager);
}

TEST_CASE("reward state survives a checkpoint round trip") {
  pipeline::reward_model a(reward_options{});
  for (double gen : {1.0, 2.0, 3.0}) (void)score(a, verdict("t", VerdictStatus::ok, gen, 10), 0);
  pipeline::reward_model b(reward_options{});
  REQUIRE(b.from_json(a.to_json()).ok());
  CHECK(b.to_json() == a.to_json());
  auto sa = score(a, verdict("t", VerdictStatus::ok, 0.5, 10), 30);
  auto sb = score(b, verdict("t", VerdictStatus::ok, 0.5, 10), 30);
  CHECK(sa.reward == sb.reward);
  CHECK(sa.baseline_ms == sb.baseline_ms);
  CHECK_FALSE(b.from_json("{\"tasks\": 3}").ok());
  CHECK_FALSE(b.from_json("not json").ok());
}

// The plain-C++ bookkeeping behind every stage actor: headers, sample ids, counters, latency.

#include <doctest/doctest.h>

#include <chrono>
#include <set>
#include <stdexcept>
#include <thread>

#include "actors/stage_core.hpp"

namespace {

using namespace kforge;
using namespace kforge::actors;

TEST_CASE("latency quantiles are within a bucket of the truth") {
  latency_histogram h;
  CHECK(h.quantile_us(0.5) == 0);
  for (int us = 1; us <= 1000; ++us) h.record(std::int64_t{us} * 1000);
  CHECK(h.count() == 1000);
  CHECK(h.quantile_us(0.50) == doctest::Approx(500).epsilon(0.10));
  CHECK(h.quantile_us(0.99) == doctest::Approx(990).epsilon(0.10));
  CHECK(h.quantile_us(1.0) == doctest::Approx(1000).epsilon(0.10));
  h.record(0);
  h.record(-5);  // a clock step backwards lands in the lowest bucket rather than anywhere else
  CHECK(h.count() == 1002);
}

TEST_CASE("derived sample ids are stable and distinct") {
  CHECK(derive_sample_id(7, 0) == derive_sample_id(7, 0));
  std::set<std::uint64_t> ids;
  for (std::uint64_t parent = 0; parent < 50; ++parent)
    for (std::uint64_t i = 0; i < 50; ++i) ids.insert(derive_sample_id(parent, i));
  CHECK(ids.size() == 2500);
}

TEST_CASE("a stage core stamps headers and counts") {
  stage_core core{"reward", "reward/1"};
  auto a = core.next_header(11, 4);
  auto b = core.next_header(12, 4);
  CHECK(a.sender == "reward/1");
  CHECK(b.message_id == a.message_id + 1);
  CHECK((a.message_id & 0xffffffffffull) == 1);
  // Two senders never hand out the same ids (a broker serves several samplers).
  stage_core other{"reward", "reward/2"};
  CHECK(other.next_header(11, 4).message_id != a.message_id);
  CHECK(a.sample_id == 11);
  CHECK(a.policy_version == 4);
  CHECK(core.new_sample_id() != core.new_sample_id());

  core.count_received();
  core.count_sent(2);
  core.count_dropped();
  core.count_error(error{"bad verdict"});
  auto m = core.snapshot(5);
  CHECK(m.stage == "reward");
  CHECK(m.name == "reward/1");
  CHECK(m.received == 1);
  CHECK(m.sent == 2);
  CHECK(m.dropped == 1);
  CHECK(m.errors == 1);
  CHECK(m.queue_depth == 5);
  CHECK(m.last_error == "reward/1: bad verdict");

  auto w = to_wire(m);
  CHECK(w.stage == "reward/1");
  CHECK(w.errors == 1);
}

TEST_CASE("logic calls are timed and exceptions become errors") {
  stage_core core{"trainer", "trainer/0"};
  auto ok = core.call([]() -> result<int> { return 3; });
  REQUIRE(ok.ok());
  CHECK(*ok == 3);
  auto failed = core.call([]() -> status { return error{"no GPU"}; });
  CHECK(failed.message() == "no GPU");
  auto thrown = core.call([]() -> result<int> { throw std::runtime_error("boom"); });
  REQUIRE_FALSE(thrown.ok());
  CHECK(thrown.message() == "stage logic threw: boom");
  CHECK(core.snapshot(0).logic_calls == 3);
}

TEST_CASE("the time inside logic calls adds up as busy_us") {
  stage_core core{"sampler", "sampler/0"};
  CHECK(core.snapshot(0).extra.at(busy_counter) == 0);  // present before any call
  auto slept = core.call([]() -> status {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    return {};
  });
  REQUIRE(slept.ok());
  const auto after_one = core.snapshot(0).extra.at(busy_counter);
  CHECK(after_one >= 30'000);
  CHECK(after_one < 30'000'000);  // microseconds, not nanoseconds
  // A call that throws was busy too; time outside calls is not.
  auto thrown = core.call([]() -> status {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    throw std::runtime_error("boom");
  });
  CHECK_FALSE(thrown.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto after_two = core.snapshot(0).extra.at(busy_counter);
  CHECK(after_two >= after_one + 10'000);
  CHECK(after_two < after_one + 200'000);  // the 200 ms outside calls are not counted

  // A caller timing the logic on its own thread records the duration itself (the sandbox worker).
  stage_core worker{"sandbox_worker", "sandbox_worker/0"};
  auto r = stage_core::guarded([]() -> result<int> { throw std::runtime_error("x"); });
  CHECK(r.message() == "stage logic threw: x");
  worker.record_call(2'500'000'000);  // 2.5 s
  worker.record_call(-7);             // a clock step backwards: a latency sample, no busy time
  const auto m = worker.snapshot(0);
  CHECK(m.logic_calls == 2);
  CHECK(m.extra.at(busy_counter) == 2'500'000);
  // It reaches the wire like every extra counter, so metrics.jsonl and the head see it.
  const auto w = to_wire(m);
  REQUIRE(w.extra.size() == 1);
  CHECK(w.extra[0]->name == "busy_us");
  CHECK(w.extra[0]->value == 2'500'000);
}

}  // namespace

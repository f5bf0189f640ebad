// Admission of candidates to a GPU by estimated memory (sandbox/memory_gate.hpp), and the run
// stage holding a claim for each candidate's run.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "sandbox/memory_gate.hpp"

namespace ks = kforge::sandbox;
using namespace std::chrono_literals;

namespace {

/// Whether a claim of `bytes` is granted within `wait` while the caller holds what it holds.
bool granted_within(ks::memory_gate& g, std::int64_t bytes, std::chrono::milliseconds wait) {
  std::atomic<bool> in{false};
  std::thread t([&] {
    ks::memory_gate::claim c(g, bytes);
    in = true;
  });
  const auto until = std::chrono::steady_clock::now() + wait;
  while (!in && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(5ms);
  const bool got = in;
  if (!got) g.set_budget(0);  // let the waiter through so the thread ends
  t.join();
  return got;
}

}  // namespace

TEST_CASE("memory gate: claims are granted while they fit the budget together") {
  ks::memory_gate g;
  g.set_budget(100);
  ks::memory_gate::claim a(g, 60);
  CHECK(g.claimed() == 60);
  CHECK(granted_within(g, 40, 500ms));
  CHECK_FALSE(granted_within(g, 41, 200ms));
}

TEST_CASE("memory gate: a waiting claim is granted when an earlier one is released") {
  ks::memory_gate g;
  g.set_budget(100);
  std::atomic<bool> second{false};
  std::thread t;
  {
    ks::memory_gate::claim a(g, 70);
    t = std::thread([&] {
      ks::memory_gate::claim b(g, 70);
      second = true;
    });
    std::this_thread::sleep_for(100ms);
    CHECK_FALSE(second);
  }
  t.join();
  CHECK(second);
  CHECK(g.claimed() == 0);
}

TEST_CASE("memory gate: a claim larger than the budget runs alone rather than never") {
  ks::memory_gate g;
  g.set_budget(100);
  CHECK(granted_within(g, 500, 500ms));
  ks::memory_gate::claim small(g, 1);
  g.set_budget(100);
  CHECK_FALSE(granted_within(g, 500, 200ms));
}

TEST_CASE("memory gate: without a budget, and for claims of nothing, nobody waits") {
  ks::memory_gate g;
  ks::memory_gate::claim a(g, std::int64_t{1} << 50);
  CHECK(g.claimed() == 0);
  g.set_budget(10);
  ks::memory_gate::claim b(g, 10);
  CHECK(granted_within(g, 0, 500ms));
}

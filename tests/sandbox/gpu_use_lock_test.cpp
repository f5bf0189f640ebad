#include <doctest/doctest.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <thread>

#include "common/gpu_use_lock.hpp"

using namespace std::chrono_literals;
using kforge::gpu_use_lock;

TEST_CASE("gpu_use_lock: shared users together, an exclusive one alone, and no new shared user jumps it") {
  // A GPU name of this test's own, so a sandbox on this host is not disturbed.
  const std::string gpu = "-test-" + std::to_string(::getpid());
  std::optional<gpu_use_lock> first(std::in_place, gpu, false);
  {
    gpu_use_lock second(gpu, false);  // shared users do not wait for one another
  }

  std::atomic<bool> timed{false}, late_shared{false}, timing_done{false};
  std::thread timer([&] {
    gpu_use_lock exclusive(gpu, true);
    timed = true;
    std::this_thread::sleep_for(100ms);
    CHECK_FALSE(late_shared.load());  // the shared user that came later waited
    timing_done = true;
  });
  std::this_thread::sleep_for(200ms);
  CHECK_FALSE(timed.load());  // waits for the shared user

  std::thread late([&] {
    gpu_use_lock shared(gpu, false);  // arrives while the exclusive user waits: queues behind it
    late_shared = true;
    CHECK(timing_done.load());
  });
  std::this_thread::sleep_for(200ms);
  CHECK_FALSE(late_shared.load());
  CHECK_FALSE(timed.load());

  first.reset();  // the last shared user leaves: the exclusive one goes, then the late one
  timer.join();
  late.join();
  CHECK(timed.load());
  CHECK(late_shared.load());
  ::unlink(gpu_use_lock::path(gpu).c_str());
  ::unlink((gpu_use_lock::path(gpu) + ".gate").c_str());
}

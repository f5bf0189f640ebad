// pipeline/trainer_ranks: the trainer's side of rank processes, with stand-in rank programs (the
// real `kforge trainer-rank` runs in test_run and, for its arithmetic, policy_trainer_test).
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "common/child_process.hpp"
#include "config/manifest.hpp"
#include "stages/trainer_ranks.hpp"
#include "tests/pipeline/process_ended.hpp"

using namespace kforge::pipeline;
namespace fs = std::filesystem;

namespace {

/// An executable shell script in the temp directory that runs `body` (fd 3 is the channel).
std::string script(const std::string& name, const std::string& body) {
  const auto path = fs::temp_directory_path() / ("kforge-rank-" + std::to_string(::getpid()) + "-" + name);
  std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
  ::chmod(path.c_str(), 0755);
  return path.string();
}

rank_processes_options two_cpu_ranks(const std::string& program) {
  rank_processes_options o;
  o.program = program;
  o.devices = {-1, -1};
  o.collective = "socket";
  o.endpoint = "ipc:///tmp/unused.sock";
  o.join_timeout = std::chrono::seconds(10);
  o.step_timeout = std::chrono::seconds(10);
  return o;
}

/// Rank 0 on the CPU and `count` ranks to come from other hosts at `endpoint`.
rank_processes_options remote_ranks(const std::string& endpoint, int count, std::chrono::milliseconds wait) {
  auto o = two_cpu_ranks("/bin/true");
  o.devices = {-1};
  o.remote = count;
  o.remote_endpoint = endpoint;
  o.join_timeout = wait;
  return o;
}

}  // namespace

TEST_CASE("trainer ranks: a rank that cannot join, dies or answers wrong fails the step, naming it") {
  SUBCASE("one rank is no group of processes") {
    auto o = two_cpu_ranks("/bin/true");
    o.devices = {-1};
    auto p = rank_processes::start(o);
    REQUIRE_FALSE(p.ok());
    CHECK(p.message().find("2 or more ranks") != std::string::npos);
  }
  SUBCASE("its join is refused") {
    const auto prog = script("refuse", "read line <&3\necho '{\"ok\":false,\"reason\":\"no model here\"}' >&3");
    auto p = rank_processes::start(two_cpu_ranks(prog));
    REQUIRE(p.ok());
    const auto s = (*p)->joined(0);
    REQUIRE_FALSE(s.ok());
    CHECK_MESSAGE(s.message().find("trainer rank 1 join: no model here") != std::string::npos, s.message());
    CHECK((*p)->failed()());  // what rank 0's socket group asks while it waits
    CHECK((*p)->failures_so_far() == "trainer rank 1: no model here");
    fs::remove(prog);
  }
  SUBCASE("it dies") {
    auto p = rank_processes::start(two_cpu_ranks("/bin/false"));
    REQUIRE(p.ok());
    const auto s = (*p)->joined(0);
    REQUIRE_FALSE(s.ok());
    CHECK_MESSAGE(s.message().find("trainer rank 1 join:") != std::string::npos, s.message());
  }
  SUBCASE("it joins, then steps to another step count than rank 0") {
    const auto prog = script("behind", "while read line <&3; do echo '{\"ok\":true,\"steps\":0}' >&3; done");
    auto p = rank_processes::start(two_cpu_ranks(prog));
    REQUIRE(p.ok());
    REQUIRE((*p)->joined(0).ok());
    bool local_ran = false;
    const auto s = (*p)->step({1, 2, 3}, [&] { local_ran = true; return kforge::status{}; }, [] { return std::int64_t{1}; });
    CHECK(local_ran);
    REQUIRE_FALSE(s.ok());
    CHECK_MESSAGE(s.message().find("trainer rank 1 is at step 0, rank 0 at 1") != std::string::npos, s.message());
    // The ranks may differ now: every later step fails at once, without asking anyone.
    bool ran_again = false;
    const auto again = (*p)->step({1}, [&] { ran_again = true; return kforge::status{}; }, [] { return std::int64_t{2}; });
    REQUIRE_FALSE(again.ok());
    CHECK_FALSE(ran_again);
    CHECK(again.message().find("failed at an earlier step") != std::string::npos);
    fs::remove(prog);
  }
}

TEST_CASE("trainer ranks from other hosts: too few hellos, or a GPU rank for CPU ranks, are errors that say what to do") {
  const int port = 24000 + static_cast<int>(::getpid() % 4000) * 2;
  const std::string endpoint = "tcp://127.0.0.1:" + std::to_string(port);
  kforge::child_options co;
  SUBCASE("one of two said hello") {
    auto remote = kforge::child_process::start({KFORGE_BINARY, "trainer-rank", "--connect", endpoint, "--device", "-1"}, co);
    REQUIRE(remote.ok());
    const auto o = remote_ranks(endpoint, 2, std::chrono::seconds(4));
    auto p = rank_processes::start(o);  // its failure ends with the destructor telling the one rank to stop
    REQUIRE_FALSE(p.ok());
    CHECK_MESSAGE(p.message().find("1 of 2 remote rank(s) said hello at " + endpoint +
                                   " (start them with kforge trainer-rank --connect " + endpoint) != std::string::npos,
                  p.message());
  }
  SUBCASE("its process ends while it joins") {
    auto remote = kforge::child_process::start({KFORGE_BINARY, "trainer-rank", "--connect", endpoint, "--device", "-1"}, co);
    REQUIRE(remote.ok());
    auto o = remote_ranks(endpoint, 1, std::chrono::minutes(5));
    o.manifest_text = std::string(default_manifest_text());  // it parses, then waits in the group for rank 0
    o.endpoint = "tcp://127.0.0.1:" + std::to_string(port + 1);
    auto p = rank_processes::start(o);
    REQUIRE_MESSAGE(p.ok(), p.message());
    std::this_thread::sleep_for(std::chrono::seconds(1));
    ::kill(remote->pid(), SIGKILL);
    const auto t0 = std::chrono::steady_clock::now();
    const auto s = (*p)->joined(0);
    REQUIRE_FALSE(s.ok());
    CHECK_MESSAGE(s.message().find("trainer rank 1 join: a remote rank's connection dropped") != std::string::npos, s.message());
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30));  // not the 5-minute limit
  }
  SUBCASE("rank 0 goes away while the rank waits in the group") {
    auto remote = kforge::child_process::start({KFORGE_BINARY, "trainer-rank", "--connect", endpoint, "--device", "-1"}, co);
    REQUIRE(remote.ok());
    auto o = remote_ranks(endpoint, 1, std::chrono::minutes(5));
    o.manifest_text = std::string(default_manifest_text());
    o.endpoint = "tcp://127.0.0.1:" + std::to_string(port + 1);
    {
      auto p = rank_processes::start(o);
      REQUIRE_MESSAGE(p.ok(), p.message());
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }  // rank 0's side is gone, its join never answered
    // The rank ends on its own.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!kforge::testing::process_ended(remote->pid()) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    CHECK(kforge::testing::process_ended(remote->pid()));
    const auto out = remote->take_output();
    CHECK_MESSAGE(out.find("rank 0 at " + endpoint + " went away: ending") != std::string::npos, out);
  }
  SUBCASE("a GPU rank to CPU ranks") {
    auto remote = kforge::child_process::start({KFORGE_BINARY, "trainer-rank", "--connect", endpoint, "--device", "0"}, co);
    REQUIRE(remote.ok());
    const auto o = remote_ranks(endpoint, 1, std::chrono::seconds(20));
    auto p = rank_processes::start(o);
    REQUIRE_FALSE(p.ok());
    CHECK_MESSAGE(p.message().find("came with a GPU (--device 0) to a group of CPU ranks") != std::string::npos, p.message());
  }
}

// End to end: the kforge binary starts real topologies — one process, and a head with two worker
// processes over ipc — and a worker is killed with SIGKILL mid-stream. Nothing may be lost or
// duplicated, and the recorded reward and buffer stages must replay exactly.
#include <doctest/doctest.h>

#include <signal.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "common/subprocess.hpp"
#include "messages/recording.hpp"

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

fs::path fresh_dir(const std::string& name) {
  auto d = fs::temp_directory_path() / ("kf-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

json read_json(const fs::path& p) {
  std::ifstream f(p);
  return json::parse(f, nullptr, false);
}

const json* stage(const json& summary, const std::string& name) {
  for (const auto& s : summary["stages"])
    if (s["stage"] == name) return &s;
  return nullptr;
}

/// The (group_id, group_index) of every verdict in a recording; fails the test on a broken file.
std::multiset<std::pair<std::uint64_t, std::uint32_t>> verdict_keys(const fs::path& file) {
  std::multiset<std::pair<std::uint64_t, std::uint32_t>> keys;
  auto r = kforge::messages::recording_reader::open(file.string());
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.message()));
  for (;;) {
    auto rec = r->next();
    REQUIRE(rec.ok());
    if (!rec->has_value()) break;
    const auto* v = (*rec)->env.as<kforge::wire::Verdict>();
    REQUIRE(v != nullptr);
    REQUIRE(v->candidate() != nullptr);
    keys.emplace(v->candidate()->group_id(), v->candidate()->group_index());
  }
  return keys;
}

int replay(const fs::path& input, const std::string& stage, std::string* output) {
  auto r = kforge::run_process({KFORGE_BINARY, "replay", input.string(), "--stage", stage}, 120s);
  REQUIRE(r.ok());
  *output = r->output;
  return r->exit_code;
}

}  // namespace

TEST_CASE("the default manifest runs end to end, and replay reproduces reward and buffer") {
  const auto dir = fresh_dir("default");
  auto r = kforge::run_process(
      {KFORGE_BINARY, "run", "--steps", "6", "--run-dir", (dir / "run").string(), "--no-progress"},
      120s);
  REQUIRE(r.ok());
  INFO(r->output);
  CHECK(r->exit_code == 0);
  CHECK(r->output.find("stand-in") != std::string::npos);  // the banner says what is synthetic
  const auto summary = read_json(dir / "run" / "summary.json");
  REQUIRE(summary.is_object());
  CHECK(summary["outcome"] == "completed");
  CHECK(summary["balanced"] == true);
  CHECK(summary["versions"].get<int>() >= 6);
  CHECK(fs::file_size(dir / "run" / "metrics.jsonl") > 0);
  CHECK(fs::exists(dir / "run" / "manifest.toml"));

  std::string out;
  CHECK(replay(dir / "run" / "recordings" / "verdicts@head.kfrec", "reward", &out) == 0);
  CHECK(out.find("0 differ") != std::string::npos);
  CHECK(replay(dir / "run" / "recordings" / "scored@head.kfrec", "buffer", &out) == 0);
  CHECK(out.find("0 differ") != std::string::npos);

  auto inspect = kforge::run_process(
      {KFORGE_BINARY, "inspect", (dir / "run" / "recordings" / "batches@head.kfrec").string(),
       "--limit", "1"},
      30s);
  REQUIRE(inspect.ok());
  CHECK(inspect->exit_code == 0);
  CHECK(json::parse(inspect->output, nullptr, false)["envelope"]["payload_type"] == "TrainBatch");
  fs::remove_all(dir);
}

TEST_CASE("three processes exchange over 10,000 envelopes; a SIGKILLed worker loses nothing") {
  const auto dir = fresh_dir("multi");
  const auto run_dir = dir / "run";
  const auto manifest = dir / "three.toml";
  std::ofstream(manifest) << R"([run]
name = "three"
mode = "async"
steps = 50
run_dir = ")" << run_dir.string() << R"("
progress = false

[gpu_groups]
rollout = []
trainer = []

[[process]]
name = "head"
[process.actors]
task_generator = { count = 1 }
sampler = { count = 1, gpu_group = "rollout" }
sandbox_pool = { count = 1 }
reward = { count = 1 }
buffer = { count = 1 }
trainer = { count = 1, gpu_group = "trainer" }

[[process]]
name = "w1"
[process.actors]
sandbox_worker = { count = 2, gpu_group = "rollout" }

[[process]]
name = "w2"
[process.actors]
sandbox_worker = { count = 2, gpu_group = "rollout" }

[record]
links = "all"

[sandbox]
stand_in_ms = 3
)";

  // Start the head; it spawns w1 and w2.
  const auto log = dir / "head.log";
  const pid_t head = ::fork();
  REQUIRE(head >= 0);
  if (head == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::execl(KFORGE_BINARY, KFORGE_BINARY, "run", "--manifest", manifest.c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }

  // Wait until w1 is working, then kill it with SIGKILL mid-stream.
  pid_t w1 = -1;
  std::uint64_t verdicts_at_kill = 0;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (std::chrono::steady_clock::now() < deadline && w1 < 0) {
    std::this_thread::sleep_for(20ms);  // polling files another process writes
    const auto procs = read_json(run_dir / "processes.json");
    std::ifstream metrics(run_dir / "metrics.jsonl");
    std::uint64_t w1_done = 0;
    for (std::string line; std::getline(metrics, line);) {
      auto j = json::parse(line, nullptr, false);
      if (j.is_object() && j["kind"] == "sandbox_worker" && j["process"] == "w1")
        w1_done = std::max<std::uint64_t>(w1_done, j["sent"].get<std::uint64_t>());
      if (j.is_object() && j["stage"] == "reward")
        verdicts_at_kill = j["received"].get<std::uint64_t>();
    }
    if (procs.is_array() && w1_done > 100)
      for (const auto& p : procs)
        if (p["name"] == "w1") w1 = p["pid"].get<pid_t>();
  }
  REQUIRE_MESSAGE(w1 > 0, "w1 never got going; see " << log);
  REQUIRE(::kill(w1, SIGKILL) == 0);

  int st = 0;
  const auto end = std::chrono::steady_clock::now() + 120s;
  while (::waitpid(head, &st, WNOHANG) == 0 && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(50ms);
  if (std::chrono::steady_clock::now() >= end) {
    ::kill(head, SIGKILL);
    FAIL("kforge run did not finish; see " << log);
  }
  std::ifstream head_log(log);
  const std::string head_out((std::istreambuf_iterator<char>(head_log)), {});
  INFO(head_out);
  CHECK(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 0);
  CHECK(head_out.find("process w1") != std::string::npos);
  CHECK(head_out.find("killed by signal 9") != std::string::npos);

  const auto summary = read_json(run_dir / "summary.json");
  REQUIRE(summary.is_object());
  CHECK(summary["outcome"] == "completed");
  CHECK(summary["balanced"] == true);
  const auto* pool = stage(summary, "sandbox_pool");
  REQUIRE(pool != nullptr);
  CHECK((*pool)["extra"]["workers_dead"].get<int>() >= 2);  // both of w1's workers
  CHECK((*pool)["extra"]["requeued"].get<int>() >= 1);       // w1 held work when it died
  CHECK((*pool)["extra"]["failed"].get<int>() == 0);         // re-queued once, then done
  const auto* sampler = stage(summary, "sampler@head");
  REQUIRE(sampler != nullptr);
  const auto candidates = (*sampler)["sent"].get<std::uint64_t>();
  CHECK(verdicts_at_kill < candidates);  // the kill came mid-stream

  // Every candidate got exactly one verdict: none lost, none duplicated.
  const auto keys = verdict_keys(run_dir / "recordings" / "verdicts@head.kfrec");
  CHECK(keys.size() == candidates);
  CHECK(std::set<std::pair<std::uint64_t, std::uint32_t>>(keys.begin(), keys.end()).size() ==
        keys.size());

  // Every link was recorded; the pool's recording of candidates holds each candidate once.
  std::uint64_t recorded_candidates = 0;
  {
    auto r = kforge::messages::recording_reader::open(
        (run_dir / "recordings" / "candidates@head.kfrec").string());
    REQUIRE(r.ok());
    for (auto rec = r->next(); rec.ok() && rec->has_value(); rec = r->next()) ++recorded_candidates;
  }
  CHECK(recorded_candidates == candidates);
  for (const char* f : {"tasks@head.kfrec", "metrics@head.kfrec", "control@w2.kfrec",
                        "sandbox_workers@w2-0.kfrec", "sandbox_workers@w2-1.kfrec"})
    CHECK_MESSAGE(fs::exists(run_dir / "recordings" / f), f);

  // Envelopes between processes and stages: tasks, candidates, verdicts, scored, batches, weights.
  std::uint64_t exchanged = 0;
  for (const auto& s : summary["stages"])
    if (s["kind"] != "bus") exchanged += s["sent"].get<std::uint64_t>();
  CHECK(exchanged >= 10000);
  MESSAGE("envelopes sent by stages: " << exchanged << ", candidates " << candidates
                                       << ", requeued " << (*pool)["extra"]["requeued"]);

  // The recording of this multi-process run replays too.
  std::string out;
  CHECK(replay(run_dir / "recordings" / "verdicts@head.kfrec", "reward", &out) == 0);
  fs::remove_all(dir);
}

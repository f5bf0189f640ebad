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
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

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

/// summary.json's time per step and GPU groups (issue 7): every group of the manifest, in its
/// order, each with the stages on it and an idle fraction in [0, 1].
void check_loop_use(const json& summary, const std::vector<std::string>& groups) {
  REQUIRE(summary["seconds_per_step"].is_number());
  CHECK(summary["seconds_per_step"].get<double>() > 0);
  CHECK(summary["loop_s"].get<double>() > 0);
  CHECK(summary["loop_s"].get<double>() <= summary["elapsed_s"].get<double>());
  REQUIRE(summary["gpu_groups"].is_array());
  REQUIRE(summary["gpu_groups"].size() == groups.size());
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const auto& g = summary["gpu_groups"][i];
    INFO(g.dump());
    CHECK(g["name"] == groups[i]);
    CHECK(g["gpus"].is_array());
    CHECK_FALSE(g["stages"].empty());
    const double idle = g["idle_fraction"].get<double>();
    CHECK(idle >= 0);
    CHECK(idle <= 1);
    CHECK(g["busy_s"].get<double>() >= 0);
    CHECK(g["elapsed_s"] == summary["loop_s"]);
  }
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
  CHECK(summary["mode"] == "async");
  check_loop_use(summary, {"rollout", "trainer"});
  CHECK(r->output.find("seconds per step: ") != std::string::npos);
  CHECK(r->output.find("GPU groups (busy = ") != std::string::npos);
  CHECK(fs::file_size(dir / "run" / "metrics.jsonl") > 0);
  CHECK(fs::exists(dir / "run" / "manifest.toml"));
  // The head wrote the report, with charts; the stand-in's correct kernels left best kernels.
  {
    std::ifstream f(dir / "run" / "report.html");
    const std::string html((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    CHECK(html.find("<svg") != std::string::npos);
    CHECK(r->output.find("report: " + (dir / "run" / "report.html").string()) != std::string::npos);
  }
  CHECK(fs::exists(dir / "run" / "best"));

  // The tasks are the built-in library's, not the stand-in's, and every scored sample went back
  // to the task generator's curriculum (the feedback link balances like the others).
  CHECK(r->output.find("real: built-in task library") != std::string::npos);
  std::set<std::string> task_ids;
  {
    auto rec = kforge::messages::recording_reader::open(
        (dir / "run" / "recordings" / "verdicts@head.kfrec").string());
    REQUIRE(rec.ok());
    for (auto e = rec->next(); e.ok() && e->has_value(); e = rec->next()) {
      const auto* v = (*e)->env.as<kforge::wire::Verdict>();
      REQUIRE(v != nullptr);
      REQUIRE(v->candidate()->task() != nullptr);
      const auto* t = v->candidate()->task();
      CHECK(t->provenance()->str().rfind("builtin:", 0) == 0);
      CHECK(t->reference()->str().find("def forward") != std::string::npos);
      task_ids.insert(t->id()->str());
    }
  }
  CHECK(task_ids.size() >= 8);  // one step's groups are distinct tasks
  const auto* generator = stage(summary, "task_generator");
  const auto* reward = stage(summary, "reward");
  REQUIRE(generator != nullptr);
  REQUIRE(reward != nullptr);
  const auto fed_back = (*generator)["extra"]["feedback"].get<std::uint64_t>();
  CHECK(fed_back > 0);
  CHECK(fed_back == (*reward)["sent"].get<std::uint64_t>());
  CHECK(fed_back == (*reward)["extra"]["feedback_sent"].get<std::uint64_t>());
  CHECK((*generator)["errors"] == 0);  // every feedback named a task in the pool
  // The reward counted every verdict it received under exactly one status.
  std::uint64_t by_status = 0;
  for (const auto& [name, n] : (*reward)["extra"].items())
    if (name.rfind("status_", 0) == 0) by_status += n.get<std::uint64_t>();
  CHECK(by_status == (*reward)["received"].get<std::uint64_t>());
  CHECK((*reward)["extra"]["status_ok"].get<std::uint64_t>() > 0);
  bool feedback_checked = false;
  for (const auto& c : summary["checks"])
    if (c["check"].get<std::string>().rfind("feedback:", 0) == 0)
      feedback_checked = c["ok"] == true;
  CHECK(feedback_checked);

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
  for (const char* f : {"tasks@head.kfrec", "feedback@head.kfrec", "metrics@head.kfrec",
                        "control@w2.kfrec",
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

TEST_CASE("a bad [tasks] setting stops kforge run before anything starts") {
  const auto dir = fresh_dir("badtasks");
  const auto manifest = dir / "bad.toml";
  std::ofstream(manifest) << R"([[process]]
name = "all"
[process.actors]
task_generator = {}
sampler = {}
sandbox_pool = {}
sandbox_worker = {}
reward = {}
buffer = {}
trainer = {}
[tasks]
files = ["no/such/tasks.jsonl"]
)";
  auto r = kforge::run_process({KFORGE_BINARY, "run", "--manifest", manifest.string(), "--run-dir",
                                (dir / "run").string(), "--no-progress"},
                               60s);
  REQUIRE(r.ok());
  INFO(r->output);
  CHECK(r->exit_code == 2);
  CHECK(r->output.find("tasks.files[0]: ") != std::string::npos);
  CHECK(r->output.find("no/such/tasks.jsonl") != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "run" / "summary.json"));  // nothing ran

  // The stand-in source still runs end to end for the tests that want synthetic tasks.
  std::ofstream(manifest) << R"([run]
steps = 3
progress = false
[[process]]
name = "all"
[process.actors]
task_generator = {}
sampler = {}
sandbox_pool = {}
sandbox_worker = {}
reward = {}
buffer = {}
trainer = {}
[tasks]
source = "stand-in"
)";
  r = kforge::run_process({KFORGE_BINARY, "run", "--manifest", manifest.string(), "--run-dir",
                           (dir / "run").string()},
                          120s);
  REQUIRE(r.ok());
  INFO(r->output);
  CHECK(r->exit_code == 0);
  CHECK(r->output.find("stand-in: synthetic elementwise tasks") != std::string::npos);
  const auto summary = read_json(dir / "run" / "summary.json");
  CHECK(summary["balanced"] == true);
  fs::remove_all(dir);
}

#if defined(KFORGE_MODEL_FIXTURES)
// The whole loop with real logic in every stage, on the CPU: the engine sampler on the tiny fixture
// Qwen2, the nvcc sandbox in compile-only mode, reward, buffer, and the GRPO trainer publishing
// weights by file to the sampler. A random model writes no kernel that compiles, so every reward is
// 0 and no group carries a signal; what this checks is the plumbing: versions advance, every weights
// file is loaded by the sampler, later candidates carry the newer version, nothing is lost, and
// replay reproduces the reward and buffer stages.
TEST_CASE("a real model runs the whole loop in compile-only mode") {
  const auto dir = fresh_dir("model");
  const auto model = dir / "model";
  fs::create_directories(model);
  for (const char* sub : {"qwen2", "tokenizer"})
    for (const auto& f : fs::directory_iterator(fs::path(KFORGE_MODEL_FIXTURES) / sub))
      fs::copy_file(f.path(), model / f.path().filename());
  const auto manifest = dir / "tiny.toml";
  std::ofstream(manifest) << R"([run]
name = "tiny"
mode = "sync"
steps = 3
seed = 1
progress = false

[gpu_groups]
rollout = []
trainer = []

[[process]]
name = "head"
[process.actors]
task_generator = { count = 1 }
sampler        = { count = 1, gpu_group = "rollout" }
sandbox_pool   = { count = 1 }
sandbox_worker = { count = 1, gpu_group = "rollout" }
reward         = { count = 1 }
buffer         = { count = 1 }
trainer        = { count = 1, gpu_group = "trainer" }

[tasks]
# The tiny model's context is short: a one-line prompt instead of the full template.
prompt_template = ")" << KFORGE_SOURCE_DIR << R"(/tests/pipeline/data/short_prompt_template.txt"

[sampler]
group_size = 4
max_new_tokens = 32
model = ")" << model.string() << R"("

[buffer]
groups_per_batch = 2

[sandbox]
backend = "nvcc"

[record]
links = ["verdicts", "scored", "batches", "weights"]
)";
  auto r = kforge::run_process({KFORGE_BINARY, "run", "--manifest", manifest.string(), "--run-dir",
                                (dir / "run").string(), "--no-progress"},
                               300s);
  REQUIRE(r.ok());
  INFO(r->output);
  CHECK(r->exit_code == 0);
  CHECK(r->output.find("real: LibTorch engine") != std::string::npos);
  CHECK(r->output.find("real: GRPO") != std::string::npos);
  CHECK(r->output.find("COMPILE-ONLY") != std::string::npos);
  const auto summary = read_json(dir / "run" / "summary.json");
  REQUIRE(summary.is_object());
  CHECK(summary["outcome"] == "completed");
  CHECK(summary["balanced"] == true);
  for (const char* s : {"sampler@head", "trainer@head", "sandbox_worker@head", "reward"}) {
    const auto* st = stage(summary, s);
    REQUIRE_MESSAGE(st != nullptr, s);
    CHECK_MESSAGE((*st)["errors"] == 0, s);
  }
  CHECK((*stage(summary, "sampler@head"))["sent"] == 24);  // 3 steps x 2 groups x 4

  // Generation with a real model takes time, and every stage reports the time inside its logic;
  // the groups hold the stages the manifest puts on them.
  check_loop_use(summary, {"rollout", "trainer"});
  CHECK((*stage(summary, "sampler@head"))["extra"]["busy_us"].get<std::uint64_t>() > 0);
  CHECK((*stage(summary, "trainer@head"))["extra"]["busy_us"].get<std::uint64_t>() > 0);
  CHECK((*stage(summary, "sandbox_worker@head"))["extra"]["busy_us"].get<std::uint64_t>() > 0);
  {
    const auto& rollout = summary["gpu_groups"][0];
    std::set<std::string> on_rollout;
    for (const auto& st : rollout["stages"]) on_rollout.insert(st["stage"].get<std::string>());
    CHECK(on_rollout == std::set<std::string>{"sampler@head", "sandbox_worker@head"});
    CHECK(rollout["gpus"].empty());  // [] in the manifest: the CPU
    CHECK(rollout["busy_s"].get<double>() > 0);
    CHECK(rollout["idle_fraction"].get<double>() < 1);
    const auto& trainer = summary["gpu_groups"][1];
    REQUIRE(trainer["stages"].size() == 1);
    CHECK(trainer["stages"][0]["stage"] == "trainer@head");
  }

  // One statistics line and one weights file per step; the sampler loaded each (no errors above)
  // and tagged the candidates generated after it.
  std::ifstream log(dir / "run" / "train.jsonl");
  std::vector<json> steps;
  for (std::string line; std::getline(log, line);) steps.push_back(json::parse(line));
  REQUIRE(steps.size() == 3);
  for (std::size_t i = 0; i < steps.size(); ++i) {
    CHECK(steps[i]["policy_version"] == i + 1);
    CHECK(steps[i]["groups"] == 2);
  }
  CHECK(fs::exists(dir / "run" / "weights" / "policy-v3.safetensors"));
  std::set<std::uint64_t> versions;
  {
    auto rec = kforge::messages::recording_reader::open(
        (dir / "run" / "recordings" / "verdicts@head.kfrec").string());
    REQUIRE(rec.ok());
    for (auto e = rec->next(); e.ok() && e->has_value(); e = rec->next()) {
      const auto* v = (*e)->env.as<kforge::wire::Verdict>();
      REQUIRE(v != nullptr);
      CHECK(v->candidate()->completion_tokens()->size() > 0);
      CHECK(v->candidate()->logprobs()->size() == v->candidate()->completion_tokens()->size());
      versions.insert((*e)->env->policy_version());
    }
  }
  CHECK(versions == std::set<std::uint64_t>{0, 1, 2});  // sync: step s samples with version s

  std::string out;
  CHECK(replay(dir / "run" / "recordings" / "verdicts@head.kfrec", "reward", &out) == 0);
  CHECK(out.find("0 differ") != std::string::npos);
  CHECK(replay(dir / "run" / "recordings" / "scored@head.kfrec", "buffer", &out) == 0);
  CHECK(out.find("0 differ") != std::string::npos);
  fs::remove_all(dir);
}
#endif

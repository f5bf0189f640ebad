// End to end: the kforge binary starts real topologies — one process, and a head with two worker
// processes over ipc — and a worker is killed with SIGKILL mid-stream. Nothing may be lost or
// duplicated, and the recorded reward and buffer stages must replay exactly.
#include <doctest/doctest.h>
#include <httplib.h>

#include <signal.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/child_process.hpp"
#include "tests/file_size_limit.hpp"
#include "tests/pipeline/one_process_topology.hpp"
#include "tests/pipeline/process_ended.hpp"
#include "common/subprocess.hpp"
#include "messages/recording.hpp"
#if defined(KFORGE_MODEL_FIXTURES)
#include "tests/pipeline/tiny_model_manifest.hpp"
#endif

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

/// The sandbox pool's one worker, in a run where nothing failed: still there or gone with the run
/// (DISCONNECT), never counted dead — workers_dead is for workers lost mid-run.
void check_worker_not_dead(const json& summary) {
  const auto* pool = stage(summary, "sandbox_pool");
  REQUIRE(pool != nullptr);
  const auto& x = (*pool)["extra"];
  INFO(x.dump());
  CHECK(x["workers_dead"] == 0);
  CHECK(x["workers_alive"] == 1 - x.value("workers_left", 0));
}

/// summary.json's time per step and GPU groups: every group of the manifest, in its
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

/// Starts the kforge binary with `args`, its output going to `log`; returns its pid.
pid_t start_kforge(const std::vector<std::string>& args, const fs::path& log) {
  std::vector<std::string> all{KFORGE_BINARY};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::execv(KFORGE_BINARY, argv.data());
    ::_exit(127);
  }
  return pid;
}

/// Waits for `pid` to end within `limit` (SIGKILL and a test failure otherwise); its wait status.
int wait_for(pid_t pid, std::chrono::seconds limit, const fs::path& log) {
  int st = 0;
  const auto end = std::chrono::steady_clock::now() + limit;
  while (::waitpid(pid, &st, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() >= end) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &st, 0);
      FAIL("kforge did not finish in " << limit.count() << " s; see " << log);
    }
    std::this_thread::sleep_for(50ms);  // polling a child process
  }
  return st;
}

/// The loop with stand-ins: seconds on any host. The embedded default needs a GPU.
const std::string stand_in_manifest = KFORGE_SOURCE_DIR "/deploy/manifests/stand_in.toml";

std::string read_text(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

int replay(const fs::path& input, const std::string& stage, std::string* output) {
  auto r = kforge::run_process({KFORGE_BINARY, "replay", input.string(), "--stage", stage}, 120s);
  REQUIRE(r.ok());
  *output = r->output;
  return r->exit_code;
}

/// `kforge run --manifest MANIFEST --run-dir RUN_DIR --no-progress [EXTRA...]` with a time limit;
/// REQUIREs that it could be started (its exit code is the caller's to check).
kforge::result<kforge::process_output> run_manifest(const fs::path& manifest, const fs::path& run_dir,
                                                    std::chrono::seconds limit,
                                                    const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args{KFORGE_BINARY, "run", "--manifest", manifest.string(), "--run-dir", run_dir.string(),
                                "--no-progress"};
  args.insert(args.end(), extra.begin(), extra.end());
  auto r = kforge::run_process(args, limit);
  REQUIRE(r.ok());
  return r;
}

}  // namespace

TEST_CASE("the stand-in manifest runs end to end, and replay reproduces reward and buffer") {
  const auto dir = fresh_dir("default");
  auto r = run_manifest(stand_in_manifest, dir / "run", 120s, {"--steps", "6"});
  INFO(r->output);
  CHECK(r->exit_code == 0);
  CHECK(r->output.find("stand-in") != std::string::npos);  // the banner says what is synthetic
  const auto summary = read_json(dir / "run" / "summary.json");
  REQUIRE(summary.is_object());
  CHECK(summary["outcome"] == "completed");
  CHECK(summary["stopped_by"] == "steps");
  CHECK(summary["balanced"] == true);
  CHECK(summary["versions"].get<int>() >= 6);
  {  // the buffer's drops, by reason, add up to its dropped count
    const auto* buffer = stage(summary, "buffer");
    REQUIRE(buffer != nullptr);
    std::uint64_t parts = 0;
    for (const auto& [name, v] : (*buffer)["extra"].items())
      if (name.rfind("dropped_", 0) == 0) parts += v.get<std::uint64_t>();
    CHECK(parts == (*buffer)["dropped"].get<std::uint64_t>());
    if ((*buffer)["dropped"].get<std::uint64_t>() == 0)  // no drop, no refill: none by mistake
      CHECK(summary["refill_steps"].get<int>() == 0);
  }
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

TEST_CASE("multi-turn episodes run end to end: turns go back to the samplers, episodes to the buffer") {
  const auto dir = fresh_dir("episodes");
  const auto manifest = dir / "episodes.toml";
  std::string text = read_text(stand_in_manifest);
  const std::string links = "links = [\"verdicts\", \"scored\", \"batches\", \"weights\"]";
  REQUIRE(text.find(links) != std::string::npos);
  text.replace(text.find(links), links.size(),
               "links = [\"verdicts\", \"scored\", \"batches\", \"weights\", \"observations\"]");
  // Per-turn returns: the reward stage stores them in each finished episode (stand-in trainer).
  std::ofstream(manifest) << text << "\n[agent]\nmax_turns = 3\nreward = \"turn_returns\"\n";
  auto r = run_manifest(manifest, dir / "run", 120s, {"--steps", "4"});
  INFO(r->output);
  CHECK(r->exit_code == 0);
  CHECK(r->output.find("episodes: up to 3 turns; no bound on their context (agent.max_tokens = 0); "
                       "reward turn_returns (discount 0.4)") != std::string::npos);
  const auto summary = read_json(dir / "run" / "summary.json");
  REQUIRE(summary.is_object());
  CHECK(summary["outcome"] == "completed");
  CHECK(summary["balanced"] == true);
  const auto* reward = stage(summary, "reward");
  const auto* sampler = stage(summary, "sampler@head");
  REQUIRE(reward != nullptr);
  REQUIRE(sampler != nullptr);
  const auto turns_on = (*reward)["extra"]["observations_sent"].get<std::uint64_t>();
  const auto episodes = (*reward)["sent"].get<std::uint64_t>();
  CHECK(episodes > 0);
  CHECK(turns_on > episodes);  // most episodes take more than one turn
  // Every verdict is a turn that either goes on or ends its episode; every observation came back
  // as a next turn.
  CHECK((*reward)["received"].get<std::uint64_t>() == episodes + turns_on);
  CHECK((*sampler)["extra"]["observations"].get<std::uint64_t>() == turns_on);
  CHECK((*sampler)["errors"] == 0);
  bool observations_checked = false;
  for (const auto& c : summary["checks"])
    if (c["check"].get<std::string>().rfind("observations:", 0) == 0) observations_checked = c["ok"] == true;
  CHECK(observations_checked);

  // An observation is a scored turn that is not the last; an episode in a batch is a last turn
  // whose context holds its earlier turns, with a mask entry per context token.
  std::uint64_t observed = 0;
  {
    auto rec = kforge::messages::recording_reader::open(
        (dir / "run" / "recordings" / "observations@head.kfrec").string());
    REQUIRE(rec.ok());
    for (auto e = rec->next(); e.ok() && e->has_value(); e = rec->next()) {
      const auto* s = (*e)->env.as<kforge::wire::Scored>();
      REQUIRE(s != nullptr);
      const auto* ep = s->verdict()->candidate()->episode();
      REQUIRE(ep != nullptr);
      CHECK(ep->turn() < 3);
      ++observed;
    }
  }
  CHECK(observed == turns_on);
  std::uint64_t trained = 0;
  {
    auto rec = kforge::messages::recording_reader::open(
        (dir / "run" / "recordings" / "scored@head.kfrec").string());
    REQUIRE(rec.ok());
    for (auto e = rec->next(); e.ok() && e->has_value(); e = rec->next()) {
      const auto* c = (*e)->env.as<kforge::wire::Scored>()->verdict()->candidate();
      const auto* ep = c->episode();
      REQUIRE(ep != nullptr);
      // FlatBuffers leaves an empty vector out.
      auto size = [](const auto* v) { return v ? v->size() : 0u; };
      CHECK(ep->turn() >= 1);
      CHECK(size(ep->turn_rewards()) == ep->turn() - 1);
      CHECK(size(ep->context_mask()) == size(c->prompt_tokens()));
      // A finished episode carries a return per turn, the first one its reward.
      REQUIRE(size(ep->turn_returns()) == size(ep->turn_rewards()) + 1);
      CHECK(ep->turn_returns()->Get(0) == doctest::Approx((*e)->env.as<kforge::wire::Scored>()->reward()));
      trained += ep->turn() == 3;
    }
  }
  CHECK(trained > 0);

  std::string out;
  CHECK(replay(dir / "run" / "recordings" / "verdicts@head.kfrec", "reward", &out) == 0);
  CHECK(out.find("0 differ") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("a run serves its live metrics to a Prometheus scraper at run.metrics_port") {
  const auto dir = fresh_dir("metrics-port");
  // A port free a moment ago (bound, read back, closed).
  int port = 0;
  {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port = ntohs(a.sin_port);
    ::close(fd);
  }
  REQUIRE(port > 0);
  const auto manifest = dir / "metrics.toml";
  std::string text = read_text(stand_in_manifest);
  const std::string run_table = "[run]\n";
  REQUIRE(text.find(run_table) != std::string::npos);
  text.insert(text.find(run_table) + run_table.size(), "metrics_port = " + std::to_string(port) + "\n");
  std::ofstream(manifest) << text;
  kforge::result<kforge::process_output> r = kforge::error{"not run"};
  std::thread run([&] { r = run_manifest(manifest, dir / "run", 120s, {"--steps", "100000000", "--time-limit", "4"}); });
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(1);
  client.set_read_timeout(2);
  std::string scraped;
  for (int i = 0; i < 100 && scraped.find("kforge_stage_sent_total{stage=\"sampler@head\"") == std::string::npos; ++i) {
    std::this_thread::sleep_for(100ms);
    if (auto res = client.Get("/metrics"); res && res->status == 200) scraped = res->body;
  }
  run.join();
  INFO(scraped);
  REQUIRE(r.ok());
  CHECK(r->exit_code == 0);
  CHECK(r->output.find("metrics: http://0.0.0.0:" + std::to_string(port) + "/metrics") != std::string::npos);
  CHECK(scraped.find("# TYPE kforge_stage_sent_total counter") != std::string::npos);
  CHECK(scraped.find("kforge_stage_sent_total{stage=\"sampler@head\",kind=\"sampler\",process=\"head\"}") != std::string::npos);
  CHECK(scraped.find("kforge_policy_version ") != std::string::npos);
  CHECK(scraped.find("kforge_gpu_group_busy_fraction{group=\"rollout\"}") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("--time-limit ends a run as its steps would: drained, balanced, exit 0") {
  const auto dir = fresh_dir("time-limit");
  auto r = run_manifest(stand_in_manifest, dir / "run", 120s, {"--steps", "100000000", "--time-limit", "3"});
  INFO(r->output);
  CHECK(r->exit_code == 0);
  CHECK(r->output.find("time limit of 3 s reached at step") != std::string::npos);
  const auto summary = read_json(dir / "run" / "summary.json");
  REQUIRE(summary.is_object());
  CHECK(summary["outcome"] == "completed");
  CHECK(summary["stopped_by"] == "time_limit_s");
  CHECK(summary["balanced"] == true);
  CHECK(summary["versions"].get<std::int64_t>() >= 1);
  CHECK(summary["versions"].get<std::int64_t>() < 100000000);
  CHECK(summary["elapsed_s"].get<double>() < 60.0);
  check_worker_not_dead(summary);  // it left as the run stopped, idle: no death

  auto bad = run_manifest(stand_in_manifest, dir / "bad", 30s, {"--time-limit", "-1"});
  CHECK(bad->exit_code == 2);
  CHECK(bad->output.find("--time-limit must be >= 0") != std::string::npos);
}

TEST_CASE("a run that stops with the sandbox behind counts what it left unjudged, and balances") {
  // 300 ms a candidate, 2 at a time: the stand-in sampler is far ahead when the time is up.
  const auto dir = fresh_dir("unjudged");
  const auto manifest = dir / "slow.toml";
  std::ofstream(manifest) << read_text(stand_in_manifest) << "\n[sandbox]\nstand_in_ms = 300\n";
  auto r = run_manifest(manifest, dir / "run", 120s, {"--time-limit", "2"});
  INFO(r->output);
  CHECK(r->exit_code == 0);
  const auto summary = read_json(dir / "run" / "summary.json");
  REQUIRE(summary.is_object());
  CHECK(summary["stopped_by"] == "time_limit_s");
  CHECK(summary["balanced"] == true);
  const auto left = summary["unjudged_at_stop"].get<std::uint64_t>();
  CHECK(left > 0);
  CHECK(r->output.find(std::to_string(left) + " candidate(s) were left unjudged") != std::string::npos);
  const auto* pool = stage(summary, "sandbox_pool");
  REQUIRE(pool != nullptr);
  CHECK((*pool)["received"].get<std::uint64_t>() ==
        (*pool)["extra"]["completed"].get<std::uint64_t>() + left);
  check_worker_not_dead(summary);
}

// The buffer drops groups (here: a stand-in sampler repeating one kernel in every third group, so
// dedup leaves one sample and the group is too small); the step driver refills what a batch lacks.
fs::path repeating_manifest(const fs::path& dir, int repeat_every, const std::string& mode = "sync") {
  auto text = read_text(stand_in_manifest);
  const auto at = text.find("mode = \"async\"");
  REQUIRE(at != std::string::npos);
  text.replace(at, 14, "mode = \"" + mode + "\"\nstall_timeout_s = 5");
  const auto manifest = dir / "repeat.toml";
  std::ofstream(manifest) << text << "\n[sampler]\nstand_in_repeat_every = " << repeat_every << "\n";
  return manifest;
}

TEST_CASE("groups the buffer drops are refilled: a sync or async run still reaches its steps") {
  for (const std::string mode : {"sync", "async"}) {
    CAPTURE(mode);
    const auto dir = fresh_dir("refill-" + mode);
    auto r = run_manifest(repeating_manifest(dir, 3, mode), dir / "run", 120s, {"--steps", "6"});
    INFO(r->output);
    CHECK(r->exit_code == 0);
    CHECK(r->output.find("the loop ran dry at step") != std::string::npos);
    const auto summary = read_json(dir / "run" / "summary.json");
    REQUIRE(summary.is_object());
    CHECK(summary["outcome"] == "completed");
    CHECK(summary["stopped_by"] == "steps");
    CHECK(summary["balanced"] == true);
    CHECK(summary["versions"].get<int>() >= 6);  // leftovers may make one more batch while draining
    CHECK(summary["refill_steps"].get<int>() >= 1);
    const auto* buffer = stage(summary, "buffer");
    REQUIRE(buffer != nullptr);
    CHECK((*buffer)["extra"]["dropped_duplicate"].get<std::uint64_t>() > 0);
    CHECK((*buffer)["extra"]["dropped_small_group"].get<std::uint64_t>() > 0);
    fs::remove_all(dir);
  }
}

TEST_CASE("refills are bounded: a policy whose every group is dropped ends in the stall report") {
  // 8 refills in a row without a new version (refill_policy::max_in_a_row), then the stall.
  const auto dir = fresh_dir("refill-cap");
  auto r = run_manifest(repeating_manifest(dir, 1), dir / "run", 120s, {"--steps", "3"});
  INFO(r->output);
  CHECK(r->exit_code == 1);
  CHECK(r->output.find("stalled: nothing moved for 5 s (run.stall_timeout_s) after 8 refill step(s) "
                       "in a row without a new policy version") != std::string::npos);
  const auto summary = read_json(dir / "run" / "summary.json");
  REQUIRE(summary.is_object());
  CHECK(summary["versions"].get<int>() == 0);
  CHECK(summary["refill_steps"].get<int>() == 8);
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
  const pid_t head = start_kforge({"run", "--manifest", manifest.string()}, log);

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

  const int st = wait_for(head, 120s, log);
  const std::string head_out = read_text(log);
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

// A run that cannot write its results must not report itself completed. Tests run as root, whom
// permission bits do not stop, so the disk refuses otherwise: a directory where a file goes (its
// open or the rename into place fails), and a full disk (RLIMIT_FSIZE, SIGXFSZ ignored: a write
// past it fails with EFBIG). A link to /dev/full would do for writes, but the report reads the
// file back, and /dev/full reads without end.
TEST_CASE("a run that cannot write its summary or metrics ends non-zero, naming the file") {
  const auto dir = fresh_dir("unwritable");
  for (const std::string file : {"summary.json", "metrics.jsonl"}) {
    CAPTURE(file);
    const auto run_dir = dir / file;
    fs::create_directories(run_dir / file);
    auto r = run_manifest(stand_in_manifest, run_dir, 120s, {"--steps", "4"});
    INFO(r->output);
    CHECK(r->exit_code == 1);
    CHECK(r->output.find("kforge run: failed: " + (run_dir / file).string() + ": cannot ") !=
          std::string::npos);
    CHECK(r->output.find("Is a directory") != std::string::npos);
    CHECK(r->output.find("kforge run: completed") == std::string::npos);
  }
  fs::remove_all(dir);
}

/// `kforge run` of `manifest` for 50 steps on a disk with room for 64 KiB a file: enough for the
/// small files, not for the recordings and metrics of 50 steps. The limit is inherited by kforge.
kforge::result<kforge::process_output> run_on_full_disk(const fs::path& manifest, const fs::path& run_dir) {
  kforge::testing::file_size_limit limit(64 * 1024);
  return run_manifest(manifest, run_dir, 120s, {"--steps", "50"});
}

TEST_CASE("a run on a full disk ends non-zero, naming the file it could not write") {
  const auto dir = fresh_dir("disk-full");
  {  // recording links: a recording meets the limit first, or metrics.jsonl
    const auto run_dir = dir / "recorded";
    auto r = run_on_full_disk(stand_in_manifest, run_dir);
    INFO(r->output);
    CHECK(r->exit_code == 1);
    CHECK(r->output.find("kforge run: failed: ") != std::string::npos);
    CHECK(r->output.find("kforge run: completed") == std::string::npos);
    CHECK(r->output.find(run_dir.string() + "/") != std::string::npos);
    CHECK(r->output.find(": cannot write: File too large") != std::string::npos);
    // A recording cut short by the refusal keeps its whole records: it reads to a clean end.
    for (const auto& f : fs::directory_iterator(run_dir / "recordings")) {
      CAPTURE(f.path());
      auto rec = kforge::messages::recording_reader::open(f.path().string());
      REQUIRE(rec.ok());
      auto next = rec->next();
      while (next.ok() && next->has_value()) next = rec->next();
      CHECK(next.ok());
    }
  }
  {  // nothing recorded: metrics.jsonl meets it, and keeps whole lines
    auto text = read_text(stand_in_manifest);
    const auto links = text.find("links = [");
    REQUIRE(links != std::string::npos);
    text.replace(links, text.find('\n', links) - links, "links = []");
    const auto manifest = dir / "unrecorded.toml";
    std::ofstream(manifest) << text;
    const auto run_dir = dir / "unrecorded";
    auto r = run_on_full_disk(manifest, run_dir);
    INFO(r->output);
    CHECK(r->exit_code == 1);
    CHECK(r->output.find("kforge run: failed: " + (run_dir / "metrics.jsonl").string() +
                         ": cannot write: File too large") != std::string::npos);
    const auto metrics = read_text(run_dir / "metrics.jsonl");
    REQUIRE_FALSE(metrics.empty());
    CHECK(metrics.back() == '\n');
  }
  fs::remove_all(dir);
}

// The trainer's process killed mid-run: nothing can train again, so the run ends at once as failed,
// naming the process, rather than waiting out the stall timeout and a drain that cannot settle.
TEST_CASE("a run whose trainer process dies ends within seconds, non-zero, naming the process") {
  const auto dir = fresh_dir("trainer-dies");
  const auto run_dir = dir / "run";
  auto text = read_text(stand_in_manifest);
  const std::string trainer_line = "trainer        = { count = 1, gpu_group = \"trainer\" }\n";
  REQUIRE(text.find(trainer_line) != std::string::npos);
  text.erase(text.find(trainer_line), trainer_line.size());
  // A long stall timeout: a run that waited for it would take a minute.
  const std::string steps = "steps = 1000\n";
  REQUIRE(text.find(steps) != std::string::npos);
  text.replace(text.find(steps), steps.size(), "steps = 100000\nstall_timeout_s = 60\n");
  const auto manifest = dir / "two.toml";
  std::ofstream(manifest) << text << R"(
[[process]]
name = "trainer"
[process.actors]
trainer = { count = 1, gpu_group = "trainer" }

[sandbox]
stand_in_ms = 3
)";
  const auto log = dir / "head.log";
  const pid_t head = start_kforge(
      {"run", "--manifest", manifest.string(), "--run-dir", run_dir.string(), "--no-progress"}, log);
  // Kill the trainer's process once it has trained (polling files the run writes).
  pid_t trainer = -1;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (trainer < 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(50ms);
    std::uint64_t trained = 0;
    std::ifstream metrics(run_dir / "metrics.jsonl");
    for (std::string line; std::getline(metrics, line);) {
      auto j = json::parse(line, nullptr, false);
      if (j.is_object() && j["kind"] == "trainer") trained = j["received"].get<std::uint64_t>();
    }
    const auto procs = read_json(run_dir / "processes.json");
    if (trained >= 2 && procs.is_array())
      for (const auto& p : procs)
        if (p["name"] == "trainer") trainer = p["pid"].get<pid_t>();
  }
  REQUIRE_MESSAGE(trainer > 0, "the trainer never trained; see " << log);
  REQUIRE(::kill(trainer, SIGKILL) == 0);
  const auto killed = std::chrono::steady_clock::now();
  const int st = wait_for(head, 120s, log);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  const auto out = read_text(log);
  INFO(out);
  CHECK(took < 20.0);
  CHECK(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 1);
  CHECK(out.find("kforge run: failed: process trainer (pid " + std::to_string(trainer) +
                 ") killed by signal 9") != std::string::npos);
  const auto summary = read_json(run_dir / "summary.json");
  REQUIRE(summary.is_object());
  CHECK(summary["outcome"].get<std::string>().rfind("failed: process trainer", 0) == 0);
  MESSAGE("the run ended " << took << " s after its trainer's process was killed");
  fs::remove_all(dir);
}

TEST_CASE("a bad [tasks] setting stops kforge run before anything starts") {
  const auto dir = fresh_dir("badtasks");
  const auto manifest = dir / "bad.toml";
  std::ofstream(manifest) << kforge::testing::one_process_topology << R"([tasks]
files = ["no/such/tasks.jsonl"]
)";
  auto r = run_manifest(manifest, dir / "run", 60s);
  INFO(r->output);
  CHECK(r->exit_code == 2);
  CHECK(r->output.find("tasks.files[0]: ") != std::string::npos);
  CHECK(r->output.find("no/such/tasks.jsonl") != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "run" / "summary.json"));  // nothing ran

  // The stand-in source still runs end to end for the tests that want synthetic tasks.
  std::ofstream(manifest) << "[run]\nsteps = 3\nprogress = false\n" << kforge::testing::one_process_topology
                          << "[tasks]\nsource = \"stand-in\"\n";
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
/// The tiny fixture Qwen2 and its manifest (tests/pipeline/tiny_model_manifest.hpp) in DIR.
fs::path tiny_model_manifest(const fs::path& dir, int steps, const std::string& trainer_table = "",
                             const std::string& buffer_keys = "") {
  kforge::test::copy_tiny_model(dir);
  return kforge::test::write_tiny_manifest(dir, steps, trainer_table, buffer_keys);
}

/// The lines of a run's train.jsonl.
std::vector<json> train_log(const fs::path& run_dir) {
  std::ifstream log(run_dir / "train.jsonl");
  std::vector<json> steps;
  for (std::string line; std::getline(log, line);) steps.push_back(json::parse(line));
  return steps;
}

/// A real-model run's summary, checked: completed, balanced, no stage counted an error.
json completed_without_errors(const fs::path& run_dir) {
  auto summary = read_json(run_dir / "summary.json");
  REQUIRE(summary.is_object());
  CHECK(summary["outcome"] == "completed");
  CHECK(summary["balanced"] == true);
  for (const char* s : {"sampler@head", "trainer@head", "sandbox_worker@head", "reward"}) {
    const auto* st = stage(summary, s);
    REQUIRE_MESSAGE(st != nullptr, s);
    CHECK_MESSAGE((*st)["errors"] == 0, s);
  }
  return summary;
}

TEST_CASE("a real model runs the whole loop in compile-only mode") {
  const auto dir = fresh_dir("model");
  const auto manifest = tiny_model_manifest(dir, 3);
  auto r = run_manifest(manifest, dir / "run", 300s);
  INFO(r->output);
  CHECK(r->exit_code == 0);
  CHECK(r->output.find("real: LibTorch engine") != std::string::npos);
  CHECK(r->output.find("real: GRPO") != std::string::npos);
  CHECK(r->output.find("COMPILE-ONLY") != std::string::npos);
  const auto summary = completed_without_errors(dir / "run");
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
  const auto steps = train_log(dir / "run");
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
TEST_CASE("a real model works episodes of two turns: observations in its context, trained on") {
  const auto dir = fresh_dir("model-episodes");
  // The fixture model's context is 256 tokens: short observations.
  const auto manifest = tiny_model_manifest(dir, 2, "\n[agent]\nmax_turns = 2\nobservation_max_tokens = 48\n");
  auto r = run_manifest(manifest, dir / "run", 300s);
  INFO(r->output);
  CHECK(r->exit_code == 0);
  const auto summary = completed_without_errors(dir / "run");
  const auto* reward = stage(summary, "reward");
  const auto turns_on = (*reward)["extra"]["observations_sent"].get<std::uint64_t>();
  CHECK(turns_on > 0);
  CHECK((*stage(summary, "sampler@head"))["extra"]["observations"].get<std::uint64_t>() == turns_on);
  // Trained on episodes: the second turns' contexts hold the first turn and its observation.
  const auto steps = train_log(dir / "run");
  CHECK(steps.size() == 2);
  bool second_turn = false;
  auto rec = kforge::messages::recording_reader::open((dir / "run" / "recordings" / "scored@head.kfrec").string());
  REQUIRE(rec.ok());
  for (auto e = rec->next(); e.ok() && e->has_value(); e = rec->next()) {
    const auto* c = (*e)->env.as<kforge::wire::Scored>()->verdict()->candidate();
    REQUIRE(c->episode() != nullptr);
    if (c->episode()->turn() != 2) continue;
    second_turn = true;
    const auto* mask = c->episode()->context_mask();
    REQUIRE(mask != nullptr);
    CHECK(mask->size() == c->prompt_tokens()->size());
    std::size_t model_tokens = 0;
    for (const auto m : *mask) model_tokens += m;
    CHECK(model_tokens > 0);                              // the first turn's completion
    CHECK(model_tokens < mask->size() - c->episode()->prompt_size());  // and an observation
  }
  CHECK(second_turn);
  fs::remove_all(dir);
}

TEST_CASE("sampler.require_gpu refuses a run whose sampler would be on the CPU, before it starts") {
  const auto dir = fresh_dir("require-gpu");
  const auto manifest = tiny_model_manifest(dir, 1);  // rollout = []: the CPU on any host
  std::string text = read_text(manifest);
  const std::string from = "max_new_tokens = 32\n";
  REQUIRE(text.find(from) != std::string::npos);
  text.replace(text.find(from), from.size(), from + "require_gpu = true\n");
  std::ofstream(manifest) << text;
  auto r = run_manifest(manifest, dir / "run", 60s);
  INFO(r->output);
  CHECK(r->exit_code == 2);
  CHECK(r->output.find("sampler.require_gpu: the sampler would run on the CPU here (its GPU group "
                       "\"rollout\" has no GPU") != std::string::npos);
  CHECK(r->output.find("deploy/manifests/stand_in.toml") != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "run" / "summary.json"));  // nothing started
}

// The plumbing of data parallelism in a run (ranks built, stepped, rank 0 publishing). A random
// model's groups carry no signal, so no gradient is summed here: policy_trainer_test checks the
// arithmetic (2 and 3 ranks against 1).
// The trainer's results (train.jsonl, the weights it publishes, the checkpoint at the end) that
// cannot be written fail the run at once, naming the file: not a stall a minute later, nor a run
// completed without its checkpoint. Something in the file's place refuses it (tests run as root,
// whom permission bits do not stop): a directory where a file goes, a file where the checkpoints'
// directory goes.
TEST_CASE("a real model's trainer that cannot write its results ends the run non-zero, naming the file") {
  const auto dir = fresh_dir("trainer-unwritable");
  const auto manifest = tiny_model_manifest(dir, 1);
  struct blocked {
    const char* path;  ///< under the run directory
    bool directory;    ///< a directory in its place, else a file
    const char* refused;  ///< what the trainer was doing
  };
  for (const auto& b : {blocked{"train.jsonl", true, "batch of step "},
                        blocked{"weights/policy-v1.safetensors", true, "batch of step "},
                        blocked{"checkpoints", false, "checkpoint: "}}) {
    INFO("in the way: " << b.path);
    const auto run_dir = dir / fs::path(b.path).filename();
    if (b.directory) fs::create_directories(run_dir / b.path);
    else fs::create_directories(run_dir), std::ofstream(run_dir / b.path) << "in the way\n";
    const auto t0 = std::chrono::steady_clock::now();
    auto r = run_manifest(manifest, run_dir, 120s);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    INFO(r->output);
    CHECK(r->exit_code == 1);
    CHECK(took < 15);  // not after the stall timeout (run.stall_timeout_s: 20 s)
    const auto failed = "kforge run: failed: trainer@head: " + std::string(b.refused);
    CHECK(r->output.find(failed) != std::string::npos);
    CHECK(r->output.find((run_dir / b.path).string()) != std::string::npos);
    const auto summary = read_json(run_dir / "summary.json");
    REQUIRE(summary.is_object());
    const auto outcome = summary["outcome"].get<std::string>();
    CHECK(outcome.rfind("failed: trainer@head: " + std::string(b.refused), 0) == 0);
    CHECK(outcome.find((run_dir / b.path).string()) != std::string::npos);
    CHECK((*stage(summary, "trainer@head"))["extra"]["fatal_errors"].get<std::uint64_t>() >= 1);
    if (!b.directory) {  // the step was trained, its checkpoint not written
      CHECK(summary["versions"] == 1);
      CHECK(summary["checkpoint"].is_null());
      CHECK(summary["checkpoint_note"].get<std::string>().find("could not write it") !=
            std::string::npos);
    }
  }
  fs::remove_all(dir);
}

TEST_CASE("a real model's trainer runs data parallel over 2 CPU ranks") {
  const auto dir = fresh_dir("model_dp");
  // bf16 compute on the CPU too (slow there, fine for the tiny model): the published weights are
  // the bf16 copy.
  const auto manifest = tiny_model_manifest(dir, 2, "\n[trainer]\ncpu_ranks = 2\ncompute = \"bf16\"\n");
  auto r = run_manifest(manifest, dir / "run", 300s);
  INFO(r->output);
  CHECK(r->exit_code == 0);
  CHECK(r->output.find("data parallel over 2 CPU rank(s) (gradients summed each step), bf16 compute on fp32 master "
                       "weights") != std::string::npos);
  const auto summary = read_json(dir / "run" / "summary.json");
  REQUIRE(summary.is_object());
  CHECK(summary["outcome"] == "completed");
  CHECK(summary["balanced"] == true);
  CHECK((*stage(summary, "trainer@head"))["errors"] == 0);
  CHECK((*stage(summary, "sampler@head"))["errors"] == 0);  // it loaded the bf16 weights (into fp32)
  const auto steps = train_log(dir / "run");
  REQUIRE(steps.size() == 2);
  CHECK(steps[1]["policy_version"] == 2);
  const auto published = dir / "run" / "weights" / "policy-v2.safetensors";
  REQUIRE(fs::exists(published));
  {  // safetensors: an 8-byte little-endian header length, then the JSON header
    std::ifstream f(published, std::ios::binary);
    unsigned char len[8] = {};
    f.read(reinterpret_cast<char*>(len), 8);
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = n << 8 | len[i];
    std::string header(n, '\0');
    f.read(header.data(), static_cast<std::streamsize>(n));
    const auto h = json::parse(header);
    int bf16 = 0, tensors = 0;
    for (const auto& [name, t] : h.items())
      if (name != "__metadata__") ++tensors, bf16 += t["dtype"] == "BF16";
    CHECK(tensors > 0);
    CHECK(bf16 == tensors);
  }
  fs::remove_all(dir);
}

// trainer.publish = "adapters": the trainer publishes each version's adapters alone (a PEFT
// directory, no merged weights), and the engine sampler applies them unmerged.
TEST_CASE("a LoRA run publishing adapters: the engine sampler applies each version's adapters") {
  const auto dir = fresh_dir("model_lora_adapters");
  const auto manifest = tiny_model_manifest(
      dir, 2, "\n[trainer]\npublish = \"adapters\"\nlora = { rank = 4, targets = [\"q_proj\", \"v_proj\"] }\n");
  auto r = run_manifest(manifest, dir / "run", 300s);
  INFO(r->output);
  CHECK(r->exit_code == 0);
  CHECK(r->output.find("applied unmerged by the samplers") != std::string::npos);
  const auto summary = read_json(dir / "run" / "summary.json");
  REQUIRE(summary.is_object());
  CHECK(summary["balanced"] == true);
  CHECK((*stage(summary, "sampler@head"))["errors"] == 0);  // both versions' adapters loaded
  const auto weights = dir / "run" / "weights";
  CHECK(fs::exists(weights / "adapter-v2" / "adapter_model.safetensors"));
  CHECK_FALSE(fs::exists(weights / "policy-v2.safetensors"));
  fs::remove_all(dir);
}

// LoRA with activation checkpointing from the manifest: the trainer builds adapters, the samplers
// load the merged weights it publishes by file, and the final checkpoint holds the PEFT files.
TEST_CASE("a real model's trainer trains LoRA adapters with its layers recomputed in backward") {
  const auto dir = fresh_dir("model_lora");
  const auto manifest = tiny_model_manifest(
      dir, 2, "\n[trainer]\nactivation_checkpointing = true\nlora = { rank = 4, targets = [\"q_proj\", \"v_proj\"] }\n");
  auto r = run_manifest(manifest, dir / "run", 300s);
  INFO(r->output);
  CHECK(r->exit_code == 0);
  CHECK(r->output.find("LoRA rank 4 on a frozen fp32 base (fp32 adapters), layers recomputed in backward") !=
        std::string::npos);
  CHECK(r->output.find("trainer.lora is set") != std::string::npos);  // weights by file, merged
  const auto summary = read_json(dir / "run" / "summary.json");
  REQUIRE(summary.is_object());
  CHECK(summary["outcome"] == "completed");
  CHECK(summary["balanced"] == true);
  CHECK((*stage(summary, "trainer@head"))["errors"] == 0);
  CHECK((*stage(summary, "sampler@head"))["errors"] == 0);  // it loaded the merged weights
  CHECK(train_log(dir / "run").size() == 2);
  const auto ckpt = dir / "run" / "checkpoints" / "step-2";
  for (const char* f : {"adapter_config.json", "adapter_model.safetensors", "model.safetensors", "optimizer.pt"})
    CHECK_MESSAGE(fs::exists(ckpt / f), f);
  const auto config = read_json(ckpt / "adapter_config.json");
  CHECK(config["r"] == 4);
  CHECK(config["target_modules"] == json::array({"q_proj", "v_proj"}));
  fs::remove_all(dir);
}

// The same with every rank but rank 0 in a `kforge trainer-rank` process of its own, summing over a
// ZeroMQ socket (policy_trainer_test checks that arithmetic bit for bit against thread ranks).
TEST_CASE("a real model's trainer runs its ranks as processes") {
  const auto dir = fresh_dir("model_dp_processes");
  const auto manifest = tiny_model_manifest(dir, 2, "\n[trainer]\ncpu_ranks = 2\nranks = \"processes\"\n");
  auto r = run_manifest(manifest, dir / "run", 300s);
  INFO(r->output);
  CHECK(r->exit_code == 0);
  CHECK(r->output.find("data parallel over 2 CPU rank(s) (gradients summed each step, a process per rank)") !=
        std::string::npos);
  CHECK(r->output.find("trainer: ranks 1..1 joined from processes of their own (rank 1: pid ") != std::string::npos);
  CHECK(r->output.find("on cpu, summing over a ZeroMQ socket)") != std::string::npos);
  const auto summary = read_json(dir / "run" / "summary.json");
  REQUIRE(summary.is_object());
  CHECK(summary["outcome"] == "completed");
  CHECK((*stage(summary, "trainer@head"))["errors"] == 0);
  const auto steps = train_log(dir / "run");
  REQUIRE(steps.size() == 2);
  CHECK(steps[1]["policy_version"] == 2);
  CHECK(fs::exists(dir / "run" / "weights" / "policy-v2.safetensors"));
  fs::remove_all(dir);
}


// trainer.shard_optimizer over rank processes: each rank steps AdamW on its shard of the state, and
// the final checkpoint holds every rank's shard, the child's written on rank 0's request.
TEST_CASE("a real model's trainer shards its optimiser state over 2 rank processes") {
  const auto dir = fresh_dir("model_dp_sharded");
  const auto manifest =
      tiny_model_manifest(dir, 2, "\n[trainer]\ncpu_ranks = 2\nranks = \"processes\"\nshard_optimizer = true\n");
  auto r = run_manifest(manifest, dir / "run", 300s);
  INFO(r->output);
  CHECK(r->exit_code == 0);
  const auto summary = read_json(dir / "run" / "summary.json");
  REQUIRE(summary.is_object());
  CHECK(summary["outcome"] == "completed");
  CHECK((*stage(summary, "trainer@head"))["errors"] == 0);
  const auto steps = train_log(dir / "run");
  REQUIRE(steps.size() == 2);
  CHECK(steps[1]["policy_version"] == 2);
  const auto ckpt = dir / "run" / "checkpoints" / "step-2";
  for (const char* f : {"model.safetensors", "optimizer-rank-0-of-2.pt", "optimizer-rank-1-of-2.pt"})
    CHECK_MESSAGE(fs::exists(ckpt / f), f);
  CHECK_FALSE(fs::exists(ckpt / "optimizer.pt"));
  fs::remove_all(dir);
}

// A rank on "another host": `kforge trainer-rank --connect` started on its own, joining rank 0 over
// tcp (here on this host), as trainer.remote_ranks asks for.
TEST_CASE("a real model's trainer takes a rank that joins over tcp") {
  const auto dir = fresh_dir("model_dp_remote");
  const int port = 20000 + static_cast<int>(::getpid() % 5000) * 2;  // below the ephemeral range; PORT+1 too
  const std::string endpoint = "tcp://127.0.0.1:" + std::to_string(port);
  const auto manifest = tiny_model_manifest(
      dir, 2, "\n[trainer]\nranks = \"processes\"\nremote_ranks = 1\nrank_endpoint = \"" + endpoint + "\"\n");
  kforge::child_options co;
  auto remote = kforge::child_process::start({KFORGE_BINARY, "trainer-rank", "--connect", endpoint, "--device", "-1"}, co);
  REQUIRE(remote.ok());
  auto r = run_manifest(manifest, dir / "run", 300s);
  INFO(r->output);
  CHECK(r->exit_code == 0);
  CHECK(r->output.find("trainer: ranks 1..1 joined from processes of their own (rank 1: another host on cpu, summing "
                       "over a ZeroMQ socket)") != std::string::npos);
  const auto steps = train_log(dir / "run");
  REQUIRE(steps.size() == 2);
  CHECK(steps[1]["policy_version"] == 2);
  // Rank 0 said stop at the end: the remote rank has ended on its own.
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (!kforge::testing::process_ended(remote->pid()) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(100ms);
  CHECK(kforge::testing::process_ended(remote->pid()));
  const std::string rank_output = remote->take_output();
  INFO(rank_output);
  CHECK(rank_output.find("waiting for rank 0 at " + endpoint) != std::string::npos);
  CHECK(rank_output.find("went away") == std::string::npos);  // told to stop, not orphaned
  fs::remove_all(dir);
}

// Ctrl-C ends a run with a checkpoint of its last step, and --resume continues that run in its
// directory: from the checkpoint's weights and step, appending to its logs, up to the new total.
TEST_CASE("an interrupted real-model run checkpoints its last step, and --resume continues it") {
  const auto dir = fresh_dir("resume");
  // Run-wide dedup, so the buffer's record of the kernels it saw must carry over (and replay).
  const auto manifest = tiny_model_manifest(dir, 50, "", "dedup = \"run\"\n");
  const auto run_dir = dir / "run";
  const auto log = dir / "first.log";
  const pid_t head = start_kforge(
      {"run", "--manifest", manifest.string(), "--run-dir", run_dir.string(), "--no-progress"},
      log);
  // Interrupt once the first step is trained (polling a file the run writes).
  const auto deadline = std::chrono::steady_clock::now() + 240s;
  while (train_log(run_dir).empty() && std::chrono::steady_clock::now() < deadline &&
         ::waitpid(head, nullptr, WNOHANG) == 0)
    std::this_thread::sleep_for(100ms);
  REQUIRE_MESSAGE(!train_log(run_dir).empty(), "no step trained; see " << log);
  REQUIRE(::kill(head, SIGINT) == 0);
  const int st = wait_for(head, 180s, log);
  {
    INFO(read_text(log));
    CHECK(WIFEXITED(st));
    CHECK(WEXITSTATUS(st) == 130);
  }
  const auto first = read_json(run_dir / "summary.json");
  REQUIRE(first.is_object());
  CHECK(first["outcome"] == "interrupted");
  CHECK(first["balanced"] == true);
  const auto k = first["versions"].get<std::uint64_t>();
  REQUIRE(k >= 1);
  CHECK(k < 50);  // the drain finished the step in flight and started no new one
  const auto ks = std::to_string(k);
  CHECK(first["checkpoint"] == "checkpoints/step-" + ks);
  const auto ckpt = run_dir / "checkpoints" / ("step-" + ks);
  REQUIRE(fs::exists(ckpt / "trainer_state.json"));
  CHECK_FALSE(fs::exists(run_dir / "checkpoints" / ("step-" + ks + ".tmp")));
  CHECK(read_json(ckpt / "trainer_state.json")["step"] == k);
  CHECK((*stage(first, "trainer@head"))["extra"]["checkpoint_step"] == k);
  CHECK((*stage(first, "trainer@head"))["errors"] == 0);
  CHECK(train_log(run_dir).size() == k);
  // The checkpoint holds the weights the run published as version k.
  const auto published = read_text(run_dir / "weights" / ("policy-v" + ks + ".safetensors"));
  CHECK_FALSE(published.empty());
  CHECK(read_text(ckpt / "model.safetensors") == published);
  const auto seen_lines = [](const fs::path& f) {
    std::ifstream in(f);
    return std::count(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>(), '\n');
  };
  const auto seen_first = seen_lines(run_dir / "buffer" / "seen_kernels.txt");
  CHECK(seen_first >= 1);
  CHECK(fs::exists(run_dir / "curriculum.json"));  // the curriculum as of the last step's draw
  REQUIRE(fs::exists(run_dir / "reward" / "state.json"));  // written when the leg ended
  const auto reward_scored_first = read_json(run_dir / "reward" / "state.json")["scored"].get<std::uint64_t>();
  CHECK(reward_scored_first == (*stage(first, "reward"))["received"].get<std::uint64_t>());
  const auto metrics_lines_before = [&] {
    std::ifstream f(run_dir / "metrics.jsonl");
    return std::count(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>(), '\n');
  }();

  // As if the run had died after logging a step it never checkpointed: the resume trains it again
  // and the log keeps it once.
  std::ofstream(run_dir / "train.jsonl", std::ios::app)
      << json{{"step", k + 1}, {"policy_version", k + 1}}.dump() << "\n";

  // Resume to k + 2 steps.
  const auto total = k + 2;
  auto r = kforge::run_process({KFORGE_BINARY, "run", "--resume", run_dir.string(), "--steps",
                                std::to_string(total), "--no-progress"},
                               300s);
  REQUIRE(r.ok());
  {
    INFO(r->output);
    CHECK(r->exit_code == 0);
    CHECK(r->output.find("resuming at step " + ks) != std::string::npos);
    CHECK(r->output.find("task generator: the curriculum goes on from " +
                         (run_dir / "curriculum.json").string()) != std::string::npos);
    CHECK(r->output.find("\nbuffer: " + std::to_string(seen_first) +
                         " kernel(s) the run saw before step " + ks + " ") != std::string::npos);
  }
  CHECK(seen_lines(run_dir / "buffer" / ("seen_kernels-before-step-" + ks + ".txt")) == seen_first);
  const auto reward_before = run_dir / "reward" / ("state-before-step-" + ks + ".json");
  CHECK(r->output.find("reward: goes on from " + reward_before.string()) != std::string::npos);
  CHECK(read_json(reward_before)["scored"] == reward_scored_first);
  // The resumed leg's reward counts on from the first leg's.
  CHECK(read_json(run_dir / "reward" / "state.json")["scored"].get<std::uint64_t>() > reward_scored_first);
  const auto second = read_json(run_dir / "summary.json");
  REQUIRE(second.is_object());
  CHECK(second["outcome"] == "completed");
  CHECK(second["balanced"] == true);
  CHECK(second["versions"] == total);
  CHECK(second["resumed_from"] == k);
  CHECK(second["checkpoint"] == "checkpoints/step-" + std::to_string(total));
  CHECK(fs::exists(run_dir / ("summary-before-step-" + ks + ".json")));
  for (const char* s : {"sampler@head", "trainer@head", "buffer"}) {
    const auto* x = stage(second, s);
    REQUIRE_MESSAGE(x != nullptr, s);
    CHECK_MESSAGE((*x)["errors"] == 0, s);
  }
  // Nothing stale: it started at version k (a kernel leg 1 wrote again is a duplicate now).
  CHECK(stage(second, "buffer")->value("extra", json::object()).value("dropped_stale", 0) == 0);
  // Only the two new steps, and one more step of requests per refill (groups left too small
  // when the buffer drops kernels the run saw before).
  const auto refills = second.value("refill_steps", 0);
  CHECK((*stage(second, "sampler@head"))["sent"] == (2 + refills) * 2 * 4);

  // train.jsonl goes on after the first run's lines: steps 1..total once each, versions with them.
  const auto steps = train_log(run_dir);
  REQUIRE(steps.size() == total);
  for (std::size_t i = 0; i < steps.size(); ++i) {
    CHECK(steps[i]["step"] == i + 1);
    CHECK(steps[i]["policy_version"] == i + 1);
  }
  // The samplers began at the checkpoint's version: step k was sampled with version k.
  std::set<std::uint64_t> versions;
  {
    auto rec = kforge::messages::recording_reader::open(
        (run_dir / "recordings" / "verdicts@head.kfrec").string());
    REQUIRE(rec.ok());
    for (auto e = rec->next(); e.ok() && e->has_value(); e = rec->next())
      versions.insert((*e)->env->policy_version());
  }
  CHECK(versions == std::set<std::uint64_t>{k, k + 1});
  CHECK(fs::exists(run_dir / ("recordings-before-step-" + ks) / "verdicts@head.kfrec"));
  // The resumed leg replays too: its buffer's weights recording starts with the checkpoint's.
  std::string out;
  CHECK(replay(run_dir / "recordings" / "scored@head.kfrec", "buffer", &out) == 0);
  CHECK(out.find("0 differ") != std::string::npos);
  CHECK(out.find("the leg resumed at step " + ks + ": " + std::to_string(seen_first) +
                 " kernel(s)") != std::string::npos);
  // Its reward replays from the state it started from.
  CHECK(replay(run_dir / "recordings" / "verdicts@head.kfrec", "reward", &out) == 0);
  CHECK(out.find("0 differ") != std::string::npos);
  CHECK(out.find("the leg resumed at step " + ks + ": its reward starts from " + reward_before.string()) !=
        std::string::npos);
  // So does the first leg, from the folder the resume moved its recordings to.
  CHECK(replay(run_dir / ("recordings-before-step-" + ks) / "scored@head.kfrec", "buffer", &out) ==
        0);
  CHECK(out.find("0 differ") != std::string::npos);
  {
    std::ifstream f(run_dir / "metrics.jsonl");
    CHECK(std::count(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>(), '\n') >
          metrics_lines_before);  // appended, not truncated
  }

  // Nothing left to do at the total the run was last asked for.
  r = kforge::run_process({KFORGE_BINARY, "run", "--resume", run_dir.string(), "--no-progress"},
                          60s);
  REQUIRE(r.ok());
  INFO(r->output);
  CHECK(r->exit_code == 2);
  CHECK(r->output.find("nothing to do: already at step " + std::to_string(total) + " of " +
                       std::to_string(total)) != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("kforge run --resume refuses what it cannot continue") {
  const auto dir = fresh_dir("resume-errors");
  auto resume = [&](const fs::path& run_dir) {
    auto r = kforge::run_process({KFORGE_BINARY, "run", "--resume", run_dir.string()}, 60s);
    REQUIRE(r.ok());
    return *r;
  };
  // Not a run directory.
  auto r = resume(dir / "nothing");
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("no manifest.toml") != std::string::npos);

  // A stand-in run: its trainer kept no state.
  fs::create_directories(dir / "standin");
  fs::copy_file(stand_in_manifest, dir / "standin" / "manifest.toml");
  r = resume(dir / "standin");
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("resume needs the real trainer") != std::string::npos);

  // A real-model run with no complete checkpoint: one still being written does not count.
  fs::create_directories(dir / "real" / "checkpoints" / "step-2.tmp");
  fs::copy_file(tiny_model_manifest(dir, 4), dir / "real" / "manifest.toml");
  std::ofstream(dir / "real" / "checkpoints" / "step-2.tmp" / "trainer_state.json") << "{}";
  r = resume(dir / "real");
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("no complete checkpoint") != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "real" / "summary.json"));
  fs::remove_all(dir);
}

// A resume that cannot go on must leave the run directory as it found it, so that trying again
// (or a second failure) cannot move anything over the first leg's files. Checked before anything
// moves: the checkpoint's trainer_state.json against its step-N name. Found only once running (a
// checkpoint the trainer cannot load): the files moved aside stay the first leg's.
TEST_CASE("a --resume that cannot go on keeps the first leg's summary and recordings") {
  const auto dir = fresh_dir("resume-kept");
  const auto run_dir = dir / "run";
  fs::create_directories(run_dir / "recordings");
  fs::copy_file(tiny_model_manifest(dir, 4), run_dir / "manifest.toml");
  const std::string first_summary = "{\"leg\": 1}\n", first_recording = "leg 1";
  std::ofstream(run_dir / "summary.json") << first_summary;
  std::ofstream(run_dir / "recordings" / "verdicts@head.kfrec") << first_recording;
  const auto ckpt = run_dir / "checkpoints" / "step-2";
  fs::create_directories(ckpt);
  for (const char* f : {"model.safetensors", "optimizer.pt"}) std::ofstream(ckpt / f) << "not loadable";
  const auto state = [&](int step) {
    std::ofstream(ckpt / "trainer_state.json")
        << json{{"version", 1}, {"step", step}, {"policy_version", step}, {"seed", 1},
                {"kl_controller", nullptr}, {"rng", {{"cpu", ""}, {"cuda", json::array()}}}}
               .dump();
  };
  auto resume = [&] {
    auto r = kforge::run_process({KFORGE_BINARY, "run", "--resume", run_dir.string(), "--no-progress"}, 300s);
    REQUIRE(r.ok());
    return *r;
  };

  state(3);  // a checkpoint named step-2 that holds step 3
  for (int attempt = 0; attempt < 2; ++attempt) {
    CAPTURE(attempt);
    const auto r = resume();
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK(r.output.find((ckpt / "trainer_state.json").string() +
                        ": step 3, but the checkpoint's directory is named step-2") != std::string::npos);
    CHECK(read_text(run_dir / "summary.json") == first_summary);
    CHECK(read_text(run_dir / "recordings" / "verdicts@head.kfrec") == first_recording);
    CHECK_FALSE(fs::exists(run_dir / "summary-before-step-2.json"));
    CHECK_FALSE(fs::exists(run_dir / "recordings-before-step-2"));
  }

  state(2);  // now it starts, and its trainer fails to load the checkpoint
  for (int attempt = 0; attempt < 2; ++attempt) {
    CAPTURE(attempt);
    const auto r = resume();
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK(r.output.find("kforge run: failed: ") != std::string::npos);
    CHECK(read_text(run_dir / "summary-before-step-2.json") == first_summary);
    CHECK(read_text(run_dir / "recordings-before-step-2" / "verdicts@head.kfrec") == first_recording);
    CHECK(read_json(run_dir / "summary.json")["outcome"].get<std::string>().rfind("failed: ", 0) == 0);
  }
  fs::remove_all(dir);
}
#endif

namespace {

kforge::process_output run_kforge(const std::vector<std::string>& args) {
  std::vector<std::string> all{KFORGE_BINARY};
  all.insert(all.end(), args.begin(), args.end());
  auto r = kforge::run_process(all, 60s);
  REQUIRE(r.ok());
  return *r;
}

}  // namespace

TEST_CASE("usage errors exit 2 with CLI11's message; --help and --version exit 0") {
  const std::vector<std::pair<std::vector<std::string>, std::string>> usage_errors{
      {{"run", "--bogus"}, "--bogus"},
      {{"report"}, "run_dir is required"},
      {{"tasks", "list", "--bogus"}, "--bogus"},
      {{"run", "--steps", "abc"}, "abc"},
      {{}, "A subcommand is required"}};
  for (const auto& [args, message] : usage_errors) {
    const auto r = run_kforge(args);
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK(r.output.find(message) != std::string::npos);
  }
  for (const auto& args : {std::vector<std::string>{"--help"}, {"run", "--help"}, {"--version"}}) {
    const auto r = run_kforge(args);
    INFO(r.output);
    CHECK(r.exit_code == 0);
  }
}

TEST_CASE("the subcommands kforge starts itself, run by hand, say who starts them and exit 2") {
  const std::vector<std::pair<std::vector<std::string>, std::string>> internal{
      {{"sandbox-child"}, "kforge sandbox-child is started by the sandbox: fd 3 is not its control socket"},
      {{"sandbox-ref"}, "kforge sandbox-ref is started by the sandbox: fd 3 is not its control socket"},
      {{"trainer-rank"}, "kforge trainer-rank is started by the trainer: fd 3 is not its control socket"},
      {{"tasks", "check-server"}, "kforge tasks check-server is started by kforge tasks validate"}};
  for (const auto& [args, reason] : internal) {
    const auto r = run_kforge(args);
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK(r.output.find(reason) != std::string::npos);
  }
}

TEST_CASE("kforge run --check prints one line per check and exits 0 only when all pass") {
  const auto dir = fresh_dir("runcheck");
  auto check = [&](const std::string& extra_toml, const std::string& trainer_group = "\"auto\"") {
    const auto manifest = dir / "m.toml";
    std::string text = read_text(stand_in_manifest);
    const std::string automatic = "trainer = \"auto\"";
    REQUIRE(text.find(automatic) != std::string::npos);
    text.replace(text.find(automatic), automatic.size(), "trainer = " + trainer_group);
    std::ofstream(manifest) << text << extra_toml;
    return run_manifest(manifest, dir / "run", 60s, {"--check"});
  };
  auto r = check("");
  INFO(r->output);
  CHECK(r->exit_code == 0);
  CHECK(r->output.find("ok      gpus: ") != std::string::npos);
  CHECK(r->output.find("ok      model: none") != std::string::npos);
  CHECK(r->output.find("PROBLEM") == std::string::npos);
  CHECK_FALSE(fs::exists(dir / "run"));  // nothing started

  // A model directory without a tokenizer or weights.
  fs::create_directories(dir / "model");
  std::ofstream(dir / "model" / "config.json") << "{}";
  r = check("[sampler]\nmodel = \"" + (dir / "model").string() + "\"\n");
  INFO(r->output);
  CHECK(r->exit_code == 2);
  CHECK(r->output.find("PROBLEM model: " + (dir / "model").string() +
                       ": missing tokenizer.json, tokenizer_config.json, model.safetensors") !=
        std::string::npos);

  // A GPU group naming a GPU no host has.
  r = check("", "[63]");
  INFO(r->output);
  CHECK(r->exit_code == 2);
  CHECK(r->output.find("PROBLEM gpus: ") != std::string::npos);
  fs::remove_all(dir);
}

// The shipped policy, models/kforge-tiny, through the kforge binary as a user runs it: `kforge
// sample` loads it on the CPU and writes a kernel for a held-out built-in task (one it was not
// trained on), and `kforge eval --compile-only` compiles that kernel with the sandbox's nvcc
// (skipped, with a message, where there is no CUDA toolchain). The GPU verdicts are measured on
// the GPU host (bench/RESULTS.md, the held-out measures of kforge-tiny).
#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/subprocess.hpp"
#include "sandbox/toolchain.hpp"
#include "tests/json_lines.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// One of the tasks held out of the model's training, by id, as a task file `kforge sample` reads.
void write_heldout_task(const std::string& id, const fs::path& out) {
  std::ifstream in(fs::path(KFORGE_SOURCE_DIR) / "models/kforge-tiny/heldout_tasks.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && json::parse(line).value("id", "") == id) {
      std::ofstream(out) << line << "\n";
      return;
    }
  }
  FAIL("no held-out task " << id);
}

kforge::process_output kforge_cli(const std::vector<std::string>& args) {
  std::vector<std::string> argv{KFORGE_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = kforge::run_process(argv, std::chrono::minutes(5));
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.message()));
  INFO(r->output);
  REQUIRE(r->exit_code == 0);
  return *r;
}

}  // namespace

TEST_CASE("the shipped model loads, writes a kernel for a held-out task, and the kernel compiles") {
  const fs::path model = fs::path(KFORGE_SOURCE_DIR) / "models/kforge-tiny";
  const fs::path dir = fs::temp_directory_path() / ("kforge-shipped-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  write_heldout_task("l1/mish", dir / "task.jsonl");
  kforge_cli({"sample", "--model", model.string(), "--tasks", (dir / "task.jsonl").string(), "--out",
              (dir / "samples").string(), "--samples", "1", "--temperature", "0.2", "--seed", "0",
              "--max-new-tokens", "2048"});
  const auto samples = kforge::testing::read_json_lines(dir / "samples/samples.jsonl");
  REQUIRE(samples.size() == 1);
  const std::string text = samples[0].at("completion").get<std::string>();
  INFO(text);
  // It reads the task: the reference restated word for word, then a file with the entry point.
  CHECK(text.rfind("The reference computes `return torch.mish(x)`.", 0) == 0);
  CHECK(samples[0].at("has_kf_forward").get<bool>());

  if (const auto tc = kforge::sandbox::find_toolchain(); !tc) {
    MESSAGE("compile step skipped: no CUDA toolchain (" << tc.message() << ")");
  } else {
    kforge_cli({"eval", "--tasks", (dir / "samples/tasks.jsonl").string(), "--candidates",
                (dir / "samples").string(), "--out", (dir / "verdicts.jsonl").string(), "--compile-only"});
    const auto verdicts = kforge::testing::read_json_lines(dir / "verdicts.jsonl");
    REQUIRE(verdicts.size() == 1);
    INFO(verdicts[0].dump());
    CHECK(verdicts[0].at("status") == "compiled");
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
}

// `kforge optimize` with the shipped model on the CPU: the sandbox compiles only, so no turn is
// correct and every episode runs its turns; each turn's verdict comes back as an observation.
TEST_CASE("kforge optimize: episodes of the shipped model, each turn judged and fed back") {
  if (const auto tc = kforge::sandbox::find_toolchain(); !tc) {
    MESSAGE("skipped: no CUDA toolchain (" << tc.message() << ")");
    return;
  }
  const fs::path dir = fs::temp_directory_path() / ("kforge-optimize-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const auto task = fs::temp_directory_path() / ("kforge-optimize-task-" + std::to_string(::getpid()) + ".jsonl");
  write_heldout_task("l1/mish", task);
  const auto r = kforge_cli({"optimize", "--task", task.string(), "--model",
                             (fs::path(KFORGE_SOURCE_DIR) / "models/kforge-tiny").string(), "--out", dir.string(),
                             "--turns", "2", "--samples", "1", "--max-new-tokens", "96", "--compile-only"});
  CHECK(r.output.find("turn 2: 0 of 1 episode(s) with a correct kernel, 0 going on") != std::string::npos);
  for (const char* f : {"report.md", "episode-0/turn-1.cu", "episode-0/turn-2.cu", "episode-0/transcript.md"})
    CHECK_MESSAGE(fs::exists(dir / f), f);
  const auto verdict = json::parse(std::ifstream(dir / "episode-0/turn-1.json"));
  CHECK(verdict.at("turn") == 1);
  std::stringstream transcript;
  transcript << std::ifstream(dir / "episode-0/transcript.md").rdbuf();
  INFO(transcript.str());
  // Turn 1's verdict became an observation before the model's second turn.
  const auto first = transcript.str().find("## Turn 1: the model");
  REQUIRE(first != std::string::npos);
  const auto observed = transcript.str().find("## Turn 1: ", first + 1);  // the observation's header
  const auto second = transcript.str().find("## Turn 2: the model");
  CHECK(transcript.str().find("Fix it: write the whole file again") < second);
  CHECK(observed < second);
  // Bad input is refused before anything runs.
  std::vector<std::string> argv{KFORGE_BINARY, "optimize", "--task", "l1/no_such_task", "--out", (dir / "x").string()};
  auto bad = kforge::run_process(argv, std::chrono::minutes(1));
  REQUIRE(bad.ok());
  CHECK(bad->exit_code == 2);
  CHECK(bad->output.find("--task l1/no_such_task: no built-in task of that id") != std::string::npos);
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::remove(task, ec);
}

// A --baselines file that cannot be read is refused before the model or the sandbox start (no
// toolchain needed).
TEST_CASE("kforge optimize: a bad --baselines file is refused saying so") {
  const fs::path dir = fs::temp_directory_path() / ("kforge-optimize-bad-" + std::to_string(::getpid()));
  std::vector<std::string> argv{KFORGE_BINARY, "optimize", "--task", "l1/relu", "--model",
                                (fs::path(KFORGE_SOURCE_DIR) / "models/kforge-tiny").string(), "--out",
                                dir.string(), "--baselines", (dir / "no_such_baselines.jsonl").string()};
  auto bad = kforge::run_process(argv, std::chrono::minutes(1));
  REQUIRE(bad.ok());
  INFO(bad->output);
  CHECK(bad->exit_code == 2);
  CHECK(bad->output.find("kforge optimize: --baselines: ") != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "report.md"));
}

// `kforge optimize --tasks`: every task of a file in one loop, each in OUT/<task id>/, with a report
// over tasks and every turn's verdict line (task, episode, turn, file) for `kforge compare`.
TEST_CASE("kforge optimize --tasks: the episodes of several tasks, one verdict line per turn") {
  if (const auto tc = kforge::sandbox::find_toolchain(); !tc) {
    MESSAGE("skipped: no CUDA toolchain (" << tc.message() << ")");
    return;
  }
  const fs::path dir = fs::temp_directory_path() / ("kforge-optimize-tasks-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  write_heldout_task("l1/mish", dir / "a.jsonl");
  write_heldout_task("l1/tanh", dir / "b.jsonl");
  {
    std::ofstream both(dir / "tasks.jsonl");
    both << std::ifstream(dir / "a.jsonl").rdbuf() << std::ifstream(dir / "b.jsonl").rdbuf();
  }
  const auto out = dir / "out";
  const auto r = kforge_cli({"optimize", "--tasks", (dir / "tasks.jsonl").string(), "--model",
                             (fs::path(KFORGE_SOURCE_DIR) / "models/kforge-tiny").string(), "--out", out.string(),
                             "--turns", "1", "--samples", "2", "--max-new-tokens", "48", "--batch", "3",
                             "--compile-only"});
  INFO(r.output);
  CHECK(r.output.find("kforge optimize: 2 tasks, 2 episode(s) each of up to 1 turn(s)") != std::string::npos);
  CHECK(r.output.find("turn 1: 0 of 4 episode(s) with a correct kernel, 0 going on; 0 of 2 tasks") != std::string::npos);
  for (const char* f : {"report.md", "l1/mish/report.md", "l1/mish/episode-1/turn-1.cu", "l1/tanh/episode-0/turn-1.json",
                        "l1/tanh/episode-1/transcript.md"})
    CHECK_MESSAGE(fs::exists(out / f), f);
  const auto lines = kforge::testing::read_json_lines(out / "verdicts.jsonl");
  REQUIRE(lines.size() == 4);
  CHECK(lines[0].at("task") == "l1/mish");
  CHECK(lines[1].at("episode") == 1);
  CHECK(lines[3].at("task") == "l1/tanh");
  CHECK(lines[3].at("turn") == 1);
  CHECK(lines[3].at("file") == "l1/tanh/episode-1/turn-1.cu");
  CHECK(lines[3].at("status").get<std::string>() != "ok");  // compile-only: nothing ran
  std::stringstream report;
  report << std::ifstream(out / "report.md").rdbuf();
  CHECK(report.str().find("| 1 | 0 of 2 | 0.00x |") != std::string::npos);
  CHECK(report.str().find("| l1/tanh | 0 of 2 | - |") != std::string::npos);
  // --task and --tasks together are refused.
  std::vector<std::string> argv{KFORGE_BINARY, "optimize", "--task", "l1/mish", "--tasks",
                                (dir / "tasks.jsonl").string(), "--out", (dir / "x").string()};
  auto both = kforge::run_process(argv, std::chrono::minutes(1));
  REQUIRE(both.ok());
  CHECK(both->exit_code != 0);
  CHECK(both->output.find("excludes") != std::string::npos);
  std::error_code ec;
  fs::remove_all(dir, ec);
}

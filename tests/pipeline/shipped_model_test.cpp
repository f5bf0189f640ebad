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

// [reward] baseline = "compile": t_base is the sandbox's eager time rescaled by the baselines
// file's compile / eager ratio of the task, so a kernel is scored against torch.compile; a task
// without a compile time gets a neutral speed term, counted, never eager's in compile's place.
// And the manifest keys that choose it.

#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "config/manifest.hpp"
#include "tests/pipeline/one_process_topology.hpp"
#include "stage_fixtures.hpp"
#include "stages/reward.hpp"
#include "stages/reward_compile_baseline.hpp"
#include "stages/reward_stage.hpp"

using namespace kforge;
using kforge::test::verdict;
using wire::VerdictStatus;
namespace fs = std::filesystem;

namespace {

struct temp_file {
  fs::path path;
  explicit temp_file(const std::string& text)
      : path(fs::temp_directory_path() / ("kforge-reward-baselines-" + std::to_string(::getpid()) + ".jsonl")) {
    std::ofstream(path) << text;
  }
  ~temp_file() { fs::remove(path); }
};

// The H100 lines of tests/tasks/data/compile_baselines.jsonl: ReLU's compile is 2x faster than
// eager, Gemm's 1.25x slower, Softmax's compile failed.
const std::string one_device = R"({"id": "relu", "device": "NVIDIA H100 80GB HBM3", "torch": "2.11.0", "mode": "default", "shapes": "primary", "eager_ms": 2.0, "compile_ms": 1.0, "ok": true}
{"id": "gemm", "device": "NVIDIA H100 80GB HBM3", "torch": "2.11.0", "mode": "default", "shapes": "primary", "eager_ms": 1.0, "compile_ms": 1.25, "ok": true}
{"id": "softmax", "device": "NVIDIA H100 80GB HBM3", "torch": "2.11.0", "mode": "default", "shapes": "primary", "eager_ms": 3.0, "ok": false, "error": "torch.compile failed"}
)";

reward_options compile_options(const std::string& file) {
  reward_options o;
  o.baseline = reward_baseline::compile;
  o.baselines = file;
  return o;
}

wire::ScoredT score(pipeline::reward_model& m, const messages::envelope& e) {
  return m.score(*e.as<wire::Verdict>(), 0);
}

}  // namespace

TEST_CASE("baseline = \"compile\" scores a kernel against torch.compile's time on the sandbox's clock") {
  temp_file f(one_device);
  auto scale = pipeline::load_compile_scale(compile_options(f.path.string()));
  REQUIRE_MESSAGE(scale.ok(), (scale.ok() ? "" : scale.message()));
  CHECK(scale->device == "NVIDIA H100 80GB HBM3");
  CHECK(scale->describe().find("2 task(s) against torch.compile (mode default, torch 2.11.0)") == 0);
  pipeline::reward_model compile(compile_options(f.path.string()), *scale);
  pipeline::reward_model eager(reward_options{});

  // The sandbox measured eager 4 ms and the kernel 2 ms: 2x over eager. Compile is half eager's
  // time for relu, so t_base = 4 * 1/2 = 2 ms: speedup 1 over compile, reward 0.5 + 0.5 * 1.
  auto c = score(compile, verdict("relu", VerdictStatus::ok, 2.0, 4.0));
  CHECK(c.baseline_ms == doctest::Approx(2.0));
  CHECK(c.speedup == doctest::Approx(1.0));
  CHECK(c.reward == doctest::Approx(1.0));
  auto e = score(eager, verdict("relu", VerdictStatus::ok, 2.0, 4.0));
  CHECK(e.speedup == doctest::Approx(2.0));
  CHECK(e.reward == doctest::Approx(1.5));
  // gemm: compile is 1.25x eager's time, so beating eager by 1.2x is 1.5x over compile.
  auto g = score(compile, verdict("gemm", VerdictStatus::ok, 1.0, 1.2));
  CHECK(g.speedup == doctest::Approx(1.5));
  // A task whose compile failed, or that the file lacks: neutral speed term, counted.
  CHECK(compile.compile_missing() == 0);
  auto s = score(compile, verdict("softmax", VerdictStatus::ok, 1.0, 8.0));
  CHECK(s.speedup == 0);
  CHECK(s.reward == doctest::Approx(1.0));
  auto u = score(compile, verdict("unknown", VerdictStatus::ok, 1.0, 8.0));
  CHECK(u.speedup == 0);
  CHECK(compile.compile_missing() == 2);
  // Wrong answers are not counted: there is no speed to score.
  (void)score(compile, verdict("unknown", VerdictStatus::wrong_answer, 1.0, 8.0));
  CHECK(compile.compile_missing() == 2);
  // Eager scoring never asks for compile times.
  (void)score(eager, verdict("unknown", VerdictStatus::ok, 1.0, 8.0));
  CHECK(eager.compile_missing() == 0);
}

TEST_CASE("the reward stage counts correct kernels of tasks without a compile time") {
  temp_file f(one_device);
  auto scale = pipeline::load_compile_scale(compile_options(f.path.string()));
  REQUIRE(scale.ok());
  pipeline::reward_stage stage(compile_options(f.path.string()), {}, {}, {}, *scale);
  const auto v = verdict("softmax", VerdictStatus::ok, 1.0, 8.0);
  REQUIRE(stage.score(*v.as<wire::Verdict>(), actors::envelope_info{}).ok());
  bool counted = false;
  for (const auto& [name, n] : stage.take_counters())
    if (name == "compile_baseline_missing") counted = n == 1;
  CHECK(counted);
}

TEST_CASE("a baselines file the reward cannot use is refused with the reason") {
  auto missing = pipeline::load_compile_scale(compile_options("/nonexistent/b.jsonl"));
  REQUIRE(!missing.ok());
  CHECK(missing.message().find("[reward] baselines: /nonexistent/b.jsonl") == 0);
  // Two devices: which one is the sandbox's is not guessed.
  temp_file two(one_device + R"({"id": "relu", "device": "NVIDIA H200", "torch": "2.11.0", "mode": "default", "shapes": "primary", "eager_ms": 1.0, "compile_ms": 0.5, "ok": true})" "\n");
  auto several = pipeline::load_compile_scale(compile_options(two.path.string()));
  REQUIRE(!several.ok());
  CHECK(several.message().find("several devices") != std::string::npos);
  // Eager-only measurements hold no compile time.
  temp_file eager_only(R"({"id": "relu", "device": "cpu", "mode": null, "shapes": "primary", "eager_ms": 1.0, "ok": true})" "\n");
  auto none = pipeline::load_compile_scale(compile_options(eager_only.path.string()));
  REQUIRE(!none.ok());
  CHECK(none.message().find("no torch.compile time") != std::string::npos);
  // baseline = "eager" reads no file.
  CHECK(pipeline::load_compile_scale(reward_options{}).ok());
}

TEST_CASE("[reward] baseline and baselines in the manifest") {
  const std::string base = testing::one_process_topology + "[reward]\n";
  auto m = pipeline::parse_manifest(base + "baseline = \"compile\"\nbaselines = \"b.jsonl\"\n", "t.toml");
  REQUIRE_MESSAGE(m.ok(), (m.ok() ? "" : m.message()));
  CHECK(m->reward.baseline == reward_baseline::compile);
  CHECK(m->reward.baselines == "b.jsonl");
  auto d = pipeline::parse_manifest(base, "t.toml");
  REQUIRE(d.ok());
  CHECK(d->reward.baseline == reward_baseline::eager);
  auto no_file = pipeline::parse_manifest(base + "baseline = \"compile\"\n", "t.toml");
  REQUIRE(!no_file.ok());
  CHECK(no_file.message().find("reward.baselines") != std::string::npos);
  auto unused = pipeline::parse_manifest(base + "baselines = \"b.jsonl\"\n", "t.toml");
  REQUIRE(!unused.ok());
  CHECK(unused.message().find("only read with baseline = \"compile\"") != std::string::npos);
  auto bad = pipeline::parse_manifest(base + "baseline = \"inductor\"\n", "t.toml");
  REQUIRE(!bad.ok());
  CHECK(bad.message().find("must be one of \"eager\", \"compile\"") != std::string::npos);
}

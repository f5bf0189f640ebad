// What `kforge optimize --baselines` adds to its files: a correct kernel's speedup against
// torch.compile (its speedup over eager times the task's compile / eager ratio) in the verdict
// lines, best.json, the printed best and the reports, for the tasks with a compile time only; a
// task without one is said so, never scored against eager in compile's place.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/episode.hpp"
#include "commands/optimize_outputs.hpp"
#include "tasks/task.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using kforge::pipeline::episode_run;
using kforge::pipeline::optimize_run_facts;

namespace {

kforge::tasks::task task_of(const std::string& id) {
  kforge::tasks::task t;
  t.id = id;
  t.category = kforge::tasks::category::elementwise;
  return t;
}

// One episode of two turns: a correct kernel `speedup` times as fast as eager, then a wrong one.
episode_run correct_then_wrong(const kforge::tasks::task& t, double speedup) {
  kforge::agent::episode_options o;
  o.max_turns = 2;
  episode_run r{&t, 0, kforge::agent::episode({1, 2, 3}, o), "transcript", {}, {}};
  REQUIRE(r.ep.add_completion({4}, {-0.1f}));
  REQUIRE(r.ep.score(1.0, true, speedup));
  REQUIRE(r.ep.observe({5}));
  REQUIRE(r.ep.add_completion({6}, {-0.2f}));
  REQUIRE(r.ep.score(0.0, false, 0.0));
  r.verdicts = {json{{"status", "ok"}, {"speedup", speedup}, {"turn", 1}}, json{{"status", "wrong_answer"}, {"turn", 2}}};
  r.sources = {"// first", "// second"};
  return r;
}

std::string read(const fs::path& p) {
  std::stringstream s;
  s << std::ifstream(p).rdbuf();
  return s.str();
}

struct out_dir {
  fs::path path = fs::temp_directory_path() / ("kforge-optimize-outputs-" + std::to_string(::getpid()));
  out_dir() { fs::remove_all(path); }
  ~out_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

}  // namespace

TEST_CASE("optimize's files give speedups against torch.compile for the tasks measured under it") {
  const auto a = task_of("kb/l1/a"), b = task_of("kb/l1/b");
  const std::vector<episode_run> runs{correct_then_wrong(a, 2.0), correct_then_wrong(b, 3.0)};
  // torch.compile runs a in half of eager's time; b has no compile time on this GPU.
  const optimize_run_facts facts{"m", 2, true, "compile.jsonl", {{"kb/l1/a", 0.5}}};
  out_dir dir;
  std::ostringstream out;
  REQUIRE(kforge::pipeline::write_optimize_outputs(dir.path.string(), runs, true, facts, out));
  INFO(out.str());
  CHECK(out.str().find("kb/l1/a: best kernel") != std::string::npos);
  CHECK(out.str().find("2.00x the baseline (1.00x torch.compile)") != std::string::npos);
  CHECK(out.str().find("3.00x the baseline\n") != std::string::npos);

  std::vector<json> lines;
  std::ifstream f(dir.path / "verdicts.jsonl");
  for (std::string l; std::getline(f, l);) lines.push_back(json::parse(l));
  REQUIRE(lines.size() == 4);
  CHECK(lines[0].at("speedup_vs_compile").get<double>() == doctest::Approx(1.0));
  CHECK_FALSE(lines[1].contains("speedup_vs_compile"));  // wrong answer: no speedup at all
  CHECK_FALSE(lines[2].contains("speedup_vs_compile"));  // b: no compile time
  CHECK(json::parse(read(dir.path / "kb/l1/a/best.json")).at("speedup_vs_compile").get<double>() ==
        doctest::Approx(1.0));
  CHECK_FALSE(json::parse(read(dir.path / "kb/l1/b/best.json")).contains("speedup_vs_compile"));

  const auto report = read(dir.path / "report.md");
  INFO(report);
  CHECK(report.find("over torch.compile, from the compile times of compile.jsonl") != std::string::npos);
  CHECK(report.find("| kb/l1/a | 1 of 1 | 2.00x (1.00x torch.compile) |") != std::string::npos);
  CHECK(report.find("| kb/l1/b | 1 of 1 | 3.00x |") != std::string::npos);
  CHECK(read(dir.path / "kb/l1/a/report.md").find("| 2 | 1 of 1 | 2.00x (1.00x torch.compile) |") != std::string::npos);
  CHECK(read(dir.path / "kb/l1/b/report.md").find("No torch.compile time for kb/l1/b on this GPU in compile.jsonl") !=
        std::string::npos);
}

TEST_CASE("without --baselines, or without a GPU, optimize's files speak of eager only") {
  const auto a = task_of("kb/l1/a");
  const std::vector<episode_run> runs{correct_then_wrong(a, 2.0)};
  // Compile-only, --baselines given: no ratios (no GPU ran), and the reports do not speak of them.
  for (const optimize_run_facts& facts : {optimize_run_facts{"m", 2, true, "", {}},
                                          optimize_run_facts{"m", 2, false, "compile.jsonl", {}}}) {
    out_dir dir;
    std::ostringstream out;
    REQUIRE(kforge::pipeline::write_optimize_outputs(dir.path.string(), runs, false, facts, out));
    CHECK(out.str().find("torch.compile") == std::string::npos);
    CHECK(read(dir.path / "report.md").find("torch.compile") == std::string::npos);
    CHECK_FALSE(json::parse(read(dir.path / "best.json")).contains("speedup_vs_compile"));
  }
}

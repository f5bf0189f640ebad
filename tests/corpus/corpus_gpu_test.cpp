// GPU: every variant the writer gives for a handful of tasks per family runs through the real
// sandbox pool (compile, candidate child, reference server, timing) and must get verdict ok; and
// `kforge corpus build --repair-drills --gpu 0` judges its drills there, the breakages only a run
// shows among them, whose observations are then a wrong answer's or a fault's.
// Without a GPU it exits 77 (skipped).
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/parallel.hpp"
#include "corpus/corpus_command.hpp"
#include "corpus/kernel_writer.hpp"
#include "corpus/repair_drill.hpp"
#include "corpus_tasks.hpp"
#include "sandbox/pool.hpp"
#include "sandbox/verdict_json.hpp"
#include "tests/json_lines.hpp"

namespace fs = std::filesystem;
namespace ks = kforge::sandbox;
using json = nlohmann::json;

TEST_CASE("written variants of each family get verdict ok on a GPU") {
  if (ks::visible_gpu_count() == 0) {
    std::printf("SKIP: no GPU visible (the corpus kernels need one to run; deploy/gpu-host.sh runs it)\n");
    std::exit(77);
  }
  const auto lib = kforge::corpus::testing::builtin_by_id();
  std::vector<kforge::tasks::task> chosen;
  for (const auto& id : kforge::corpus::testing::family_tasks()) chosen.push_back(lib.at(id));
  int synth = 0;
  for (const auto& t : kforge::corpus::testing::synth_tasks(60)) {
    if (synth >= 6) break;
    if (kforge::corpus::write_kernels(t)) {
      chosen.push_back(t);
      ++synth;
    }
  }
  struct item {
    const kforge::tasks::task* task;
    kforge::corpus::kernel_variant v;
  };
  std::vector<item> items;
  for (const auto& t : chosen) {
    auto k = kforge::corpus::write_kernels(t);
    REQUIRE_MESSAGE(k.ok(), t.id << ": " << (k.ok() ? "" : k.message()));
    for (auto& v : *k) items.push_back({&t, std::move(v)});
  }

  ks::pool_options po;
  po.eval.compile.cache_dir = fs::temp_directory_path() / "kforge-corpus-gpu-cache";
  fs::create_directories(po.eval.compile.cache_dir);
  po.work_dir = po.eval.compile.cache_dir;
  po.run.program = KFORGE_BINARY;
  po.run.time_limit = std::chrono::milliseconds(60'000);
  po.gpus = {0};
  po.runners_per_gpu = 4;
  auto pool = ks::sandbox_pool::create(po);
  REQUIRE_MESSAGE(pool.ok(), (pool.ok() ? "" : pool.message()));
  std::printf("sandbox: %s\n", (*pool)->describe().c_str());

  std::vector<json> verdicts(items.size());
  kforge::parallel_for(items.size(), 8, [&](std::size_t i) {
    verdicts[i] = ks::verdict_json((*pool)->evaluate(*items[i].task, items[i].v.source, 4321));
  });
  int bad = 0;
  for (std::size_t i = 0; i < items.size(); ++i) {
    const std::string got = verdicts[i].value("status", "?");
    const bool ok = got == "ok";
    bad += ok ? 0 : 1;
    std::printf("%s %-36s %-34s %-14s %6.2fx %.200s\n", ok ? "  " : "XX", items[i].task->id.c_str(),
                items[i].v.name.c_str(), got.c_str(), verdicts[i].value("speedup", 0.0),
                verdicts[i].value("reason", "").c_str());
    INFO(items[i].task->id << " / " << items[i].v.name << ": " << verdicts[i].dump());
    CHECK(got == "ok");
  }
  std::printf("%zu variants, %d not ok\n", items.size(), bad);
}

TEST_CASE("repair drills judged on a GPU: breakages only a run shows get a wrong answer's or a fault's observation") {
  if (ks::visible_gpu_count() == 0) {
    std::printf("SKIP: no GPU visible\n");
    std::exit(77);
  }
  ::setenv("KFORGE_SANDBOX_PROGRAM", KFORGE_BINARY, 1);  // the candidate children are kforge's, not this test's
  const fs::path dir = fs::temp_directory_path() / ("kforge-repair-gpu-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  kforge::corpus::corpus_options o;
  o.tasks = "builtin";
  o.categories = {"elementwise", "reduction"};
  o.out = dir.string();
  o.repair_drills = 28;  // four rounds of the seven breakages
  o.gpu = 0;
  std::ostringstream out, err;
  REQUIRE_MESSAGE(kforge::corpus::corpus_command(o, out, err) == 0, err.str());
  std::printf("%s", out.str().c_str());
  std::map<std::string, int> run_only;  // edit -> drills
  for (const auto& r : kforge::testing::read_json_lines(dir / "sft.jsonl")) {
    if (r.value("drill", "") != "repair") continue;
    const std::string edit = r["edit"];
    const std::string observation = r["turns"][0]["observation"];
    const bool runs = edit == "grid_rounded_down" || edit == "sum_starts_at_one" || edit == "op_constant";
    if (!runs) continue;
    ++run_only[edit];
    INFO(edit << ": " << observation.substr(0, 400));
    // The sandbox's own verdict of a kernel that builds: anything but correct (those are dropped).
    CHECK((observation.find("wrong answer") != std::string::npos ||
           observation.find("runtime error") != std::string::npos ||
           observation.find("timeout") != std::string::npos || observation.find("suspected hack") != std::string::npos));
  }
  CHECK(run_only["grid_rounded_down"] > 0);
  CHECK(run_only["sum_starts_at_one"] > 0);
  CHECK(run_only["op_constant"] > 0);
  fs::remove_all(dir);
}

// GPU: the hostile-and-honest candidate suite (suite/suite.jsonl) through the real sandbox pool —
// compile, the candidate child, the reference server, timing — with every candidate's verdict
// checked against its expectation, and the speedup of an entry with max_speedup (one whose timing
// a trick could inflate) checked against that bound. Afterwards every candidate expected `ok` runs
// again: hostile ones before them must not have affected the sandbox.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "common/parallel.hpp"
#include "sandbox/pool.hpp"
#include "sandbox/verdict_json.hpp"
#include "suite_manifest.hpp"
#include "tasks/builtin.hpp"

namespace fs = std::filesystem;
namespace ks = kforge::sandbox;
using json = nlohmann::json;

TEST_CASE("the candidate suite gets its expected verdicts on a GPU, and the sandbox stays up") {
  if (ks::visible_gpu_count() == 0) {
    std::printf("SKIP: no GPU visible (the suite needs one; deploy/gpu-host.sh runs it)\n");
    std::exit(77);
  }
  const auto suite = kforge::sandbox::testing::load_suite();
  REQUIRE(suite.size() >= 100);
  std::vector<std::string> sources;
  for (const auto& e : suite)
    sources.push_back(kforge::sandbox::testing::read_file(kforge::sandbox::testing::suite_dir +
                                                          "/" + e.file));
  auto library = kforge::tasks::builtin_tasks();
  REQUIRE(library.ok());
  std::map<std::string, const kforge::tasks::task*> by_id;
  for (const auto& t : *library) by_id[t.id] = &t;

  ks::pool_options po;
  po.eval.compile.cache_dir = fs::temp_directory_path() / "kforge-suite-cache";
  fs::create_directories(po.eval.compile.cache_dir);
  po.work_dir = po.eval.compile.cache_dir;
  po.run.program = KFORGE_BINARY;
  po.run.time_limit = std::chrono::milliseconds(15'000);
  po.gpus = {0};
  po.runners_per_gpu = 4;
  auto pool = ks::sandbox_pool::create(po);
  REQUIRE_MESSAGE(pool.ok(), (pool.ok() ? "" : pool.message()));
  std::printf("sandbox: %s\n", (*pool)->describe().c_str());

  // Verdicts for the suite entries at `which` (indices into `suite`).
  auto evaluate_all = [&](const std::vector<std::size_t>& which) {
    std::vector<json> verdicts(which.size());
    kforge::parallel_for(which.size(), 8, [&](std::size_t k) {
      const auto& e = suite[which[k]];
      auto t = by_id.find(e.task);
      verdicts[k] = t == by_id.end()
                        ? json{{"status", "unknown task " + e.task}}
                        : ks::verdict_json((*pool)->evaluate(*t->second, sources[which[k]], 1234));
    });
    return verdicts;
  };

  // Eight at a time, then the memory hogs one by one (suite_entry::alone).
  std::vector<std::size_t> together, alone;
  for (std::size_t i = 0; i < suite.size(); ++i) (suite[i].alone ? alone : together).push_back(i);
  std::vector<json> verdicts(suite.size());
  const auto first = evaluate_all(together);
  for (std::size_t k = 0; k < together.size(); ++k) verdicts[together[k]] = first[k];
  for (const std::size_t i : alone) verdicts[i] = evaluate_all({i}).front();
  int mismatches = 0;
  std::printf("%-36s %-16s %-22s %s\n", "candidate", "task", "verdict (expected)", "reason");
  for (std::size_t i = 0; i < suite.size(); ++i) {
    const auto& e = suite[i];
    const std::string got = verdicts[i].value("status", "?");
    bool match = false;
    for (const auto& x : e.expect) match = match || x == got;
    std::string expected;
    for (const auto& x : e.expect) expected += (expected.empty() ? "" : "|") + x;
    // A bounded entry may be timed or not, but never credited with more than its bound: a trick
    // that inflates its timing (a cache, skipped work) must not earn a speedup.
    const bool over_bound = e.max_speedup > 0 && verdicts[i].contains("speedup") &&
                            verdicts[i].value("speedup", 0.0) > e.max_speedup;
    if (e.max_speedup > 0) {
      char bound[48];
      std::snprintf(bound, sizeof bound, " (speedup <= %g)", e.max_speedup);
      expected += bound;
    }
    match = match && !over_bound;
    std::printf("%s %-34s %-16s %-22s %.150s\n", match ? "  " : "XX", e.file.c_str(),
                e.task.c_str(), (got + (match ? "" : " (" + expected + ")")).c_str(),
                verdicts[i].value("reason", "").c_str());
    if (verdicts[i].contains("speedup"))
      std::printf("     %.4f ms vs baseline %.4f ms: %.2fx\n", verdicts[i].value("candidate_ms", 0.0),
                  verdicts[i].value("baseline_ms", 0.0), verdicts[i].value("speedup", 0.0));
    if (!match) ++mismatches;
    CHECK_MESSAGE(match, e.file << ": got " << got
                                << (verdicts[i].contains("speedup")
                                        ? " at " + std::to_string(verdicts[i].value("speedup", 0.0)) + "x"
                                        : std::string())
                                << ", expected " << expected << " (" << e.why
                                << "): " << verdicts[i].value("reason", ""));
  }
  std::printf("%d of %zu candidates got an unexpected verdict\n", mismatches, suite.size());

  // A kernel far slower than eager is timed in 3 trials (run_options::slow_cutoff); one as fast
  // as eager in all 30.
  for (std::size_t i = 0; i < suite.size(); ++i) {
    if (suite[i].file != "relu_few_blocks.cu" && suite[i].file != "relu_grid_stride.cu") continue;
    const bool slow = suite[i].file == "relu_few_blocks.cu";
    INFO(suite[i].file << ": " << verdicts[i].dump());
    CHECK(verdicts[i].value("trials", 0) == (slow ? 3 : 30));
    CHECK((verdicts[i].value("reason", "").find("sandbox.slow_cutoff") != std::string::npos) == slow);
  }

  // A runtime failure says on which input set and with which shapes the call failed: a kernel
  // that rejects a variant's shapes is told the shapes it rejected.
  for (std::size_t i = 0; i < suite.size(); ++i) {
    if (suite[i].file != "relu_fixed_shape.cu") continue;
    INFO(verdicts[i].dump());
    CHECK(verdicts[i].value("reason", "") ==
          "input set 3 (a variant's shapes): kf_forward returned 2 (called with x float32 [1000, 1537]; "
          "outputs y float32 [1000, 1537])");
  }

  // The sandbox survived: every candidate expected ok is still ok after all the hostile ones.
  std::vector<std::size_t> good;
  for (std::size_t i = 0; i < suite.size(); ++i)
    if (suite[i].expect.size() == 1 && suite[i].expect[0] == "ok") good.push_back(i);
  REQUIRE(!good.empty());
  const auto again = evaluate_all(good);
  for (std::size_t i = 0; i < good.size(); ++i)
    CHECK_MESSAGE(again[i].value("status", "") == "ok",
                  suite[good[i]].file << " after the hostile ones: " << again[i].dump());
}

// GPU: the hostile-and-honest candidate suite (suite/suite.jsonl) through the real sandbox pool —
// compile, the candidate child, the reference server, timing — with every candidate's verdict
// checked against its expectation. Afterwards every candidate expected `ok` runs again: hostile
// ones before them must not have affected the sandbox.
#include <doctest/doctest.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "sandbox/pool.hpp"
#include "sandbox/verdict_json.hpp"
#include "tasks/builtin.hpp"

namespace fs = std::filesystem;
namespace ks = kforge::sandbox;
using json = nlohmann::json;

namespace {

struct entry {
  std::string file, task, why;
  std::vector<std::string> expect;
  std::string source;
};

std::vector<entry> load_suite() {
  std::vector<entry> out;
  const std::string dir = std::string(KFORGE_TEST_DATA) + "/suite/";
  std::ifstream is(dir + "suite.jsonl");
  for (std::string line; std::getline(is, line);) {
    if (line.empty()) continue;
    const auto j = json::parse(line);
    entry e{j.at("file"), j.at("task"), j.value("why", ""), {}, {}};
    if (j.at("expect").is_array())
      e.expect = j.at("expect").get<std::vector<std::string>>();
    else
      e.expect = {j.at("expect").get<std::string>()};
    std::ifstream src(dir + e.file);
    std::stringstream ss;
    ss << src.rdbuf();
    e.source = ss.str();
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace

TEST_CASE("the candidate suite gets its expected verdicts on a GPU, and the sandbox stays up") {
  if (ks::visible_gpu_count() == 0) {
    std::printf("SKIP: no GPU visible (the suite needs one; deploy/gpu-host.sh runs it)\n");
    std::exit(77);
  }
  const auto suite = load_suite();
  REQUIRE(suite.size() >= 30);
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

  auto evaluate_all = [&](const std::vector<const entry*>& which) {
    std::vector<json> verdicts(which.size());
    std::atomic<std::size_t> next{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < 8; ++i)
      threads.emplace_back([&] {
        for (std::size_t k = next++; k < which.size(); k = next++) {
          const auto* e = which[k];
          auto t = by_id.find(e->task);
          if (t == by_id.end()) {
            verdicts[k] = json{{"status", "unknown task " + e->task}};
            continue;
          }
          verdicts[k] = ks::verdict_json((*pool)->evaluate(*t->second, e->source, 1234));
        }
      });
    for (auto& t : threads) t.join();
    return verdicts;
  };

  std::vector<const entry*> all;
  for (const auto& e : suite) all.push_back(&e);
  const auto verdicts = evaluate_all(all);
  int mismatches = 0;
  std::printf("%-36s %-16s %-22s %s\n", "candidate", "task", "verdict (expected)", "reason");
  for (std::size_t i = 0; i < suite.size(); ++i) {
    const auto& e = suite[i];
    const std::string got = verdicts[i].value("status", "?");
    bool match = false;
    for (const auto& x : e.expect) match = match || x == got;
    std::string expected;
    for (const auto& x : e.expect) expected += (expected.empty() ? "" : "|") + x;
    std::printf("%s %-34s %-16s %-22s %.150s\n", match ? "  " : "XX", e.file.c_str(),
                e.task.c_str(), (got + (match ? "" : " (" + expected + ")")).c_str(),
                verdicts[i].value("reason", "").c_str());
    if (verdicts[i].contains("speedup"))
      std::printf("     %.4f ms vs baseline %.4f ms: %.2fx\n", verdicts[i].value("candidate_ms", 0.0),
                  verdicts[i].value("baseline_ms", 0.0), verdicts[i].value("speedup", 0.0));
    if (!match) ++mismatches;
    CHECK_MESSAGE(match, e.file << ": got " << got << ", expected " << expected << " ("
                                << e.why << "): " << verdicts[i].value("reason", ""));
  }
  std::printf("%d of %zu candidates got an unexpected verdict\n", mismatches, suite.size());

  // The sandbox survived: every candidate expected ok is still ok after all the hostile ones.
  std::vector<const entry*> good;
  for (const auto& e : suite)
    if (e.expect.size() == 1 && e.expect[0] == "ok") good.push_back(&e);
  REQUIRE(!good.empty());
  const auto again = evaluate_all(good);
  for (std::size_t i = 0; i < good.size(); ++i)
    CHECK_MESSAGE(again[i].value("status", "") == "ok",
                  good[i]->file << " after the hostile ones: " << again[i].dump());
}

// The GPU test suite (tests/sandbox/suite/, issue 3) through the sandbox's CPU stages. Each suite
// entry names a candidate, a built-in task and the verdict the sandbox should give it. Here, with
// nvcc and no GPU: entries whose verdict is decided before anything runs (rejected, compile_error,
// link_error) must get exactly that verdict from the static check and the compile, in the order
// the sandbox applies them (evaluator.cpp: static check with the preprocessed pass, then compile
// with its library check); every other entry must pass both, so that on a GPU host only the run
// stage decides it. The manifest itself is checked too: every .cu listed once, every task built
// in, every verdict name known.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "sandbox/compiler.hpp"
#include "sandbox/static_check.hpp"
#include "sandbox/toolchain.hpp"

using namespace kforge::sandbox;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

const std::string suite_dir = std::string(KFORGE_TEST_DATA) + "/suite";
const std::string builtin_dir = std::string(KFORGE_TEST_DATA) + "/../../tasks/builtin";

// Verdicts decided before the candidate runs, and those only a GPU run decides.
const std::set<std::string> pre_run = {"rejected", "compile_error", "link_error"};
const std::set<std::string> run_time = {"ok", "runtime_error", "timeout", "wrong_answer",
                                        "hack_suspected"};

struct suite_entry {
  int line = 0;
  std::string file, task, why;
  std::vector<std::string> expect;  ///< one verdict, or the honest alternatives
  std::string rule;                 ///< for `rejected`: the rule of the first finding, if given
};

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// suite.jsonl, one object a line. Malformed lines fail the test with the line number.
std::vector<suite_entry> load_suite() {
  std::ifstream in(suite_dir + "/suite.jsonl");
  REQUIRE_MESSAGE(in.good(), "cannot read " << suite_dir << "/suite.jsonl");
  std::vector<suite_entry> entries;
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    INFO("suite.jsonl line " << n << ": " << line);
    const json j = json::parse(line, nullptr, false);
    REQUIRE_FALSE(j.is_discarded());
    REQUIRE(j.is_object());
    for (const auto& [key, value] : j.items()) {
      (void)value;
      CHECK_MESSAGE((key == "file" || key == "task" || key == "expect" || key == "why" ||
                     key == "rule"),
                    "unknown key '" << key << "'");
    }
    REQUIRE(j.contains("file"));
    REQUIRE(j.contains("task"));
    REQUIRE(j.contains("expect"));
    REQUIRE(j.contains("why"));
    suite_entry e;
    e.line = n;
    e.file = j.at("file").get<std::string>();
    e.task = j.at("task").get<std::string>();
    e.why = j.at("why").get<std::string>();
    if (j.at("expect").is_string())
      e.expect = {j.at("expect").get<std::string>()};
    else
      e.expect = j.at("expect").get<std::vector<std::string>>();
    if (j.contains("rule")) e.rule = j.at("rule").get<std::string>();
    entries.push_back(std::move(e));
  }
  return entries;
}

// Built-in task id -> whether it allows cuBLAS (the library permissions the sandbox compiles with).
std::map<std::string, bool> builtin_tasks() {
  std::map<std::string, bool> tasks;
  for (const auto& f : fs::directory_iterator(builtin_dir)) {
    if (f.path().extension() != ".jsonl") continue;
    std::ifstream in(f.path());
    for (std::string line; std::getline(in, line);) {
      const json j = json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object() || !j.contains("id")) continue;
      tasks[j.at("id").get<std::string>()] = j.value("allow_cublas", false);
    }
  }
  return tasks;
}

// What the sandbox decides before running a candidate: a pre-run verdict name, or "compiled".
struct pre_run_outcome {
  std::string verdict;
  std::string reason;
  std::string first_rule;  ///< the rule of the first finding, when rejected
  std::string log;         ///< nvcc's output, when compiled
};

pre_run_outcome evaluate_before_run(const toolchain& tc, const std::string& source, bool cublas,
                                    const std::string& cache_dir) {
  library_permissions libs;
  libs.cublas = cublas;
  check_options check;
  check.libraries = libs;
  check.preprocess_with = &tc;
  // Generous limits: the verdicts are under test here, not the speed of a loaded CI machine.
  check.preprocess_time_limit = std::chrono::milliseconds(300'000);
  pre_run_outcome out;
  const auto sv = check_source(source, check);
  if (!sv.ok()) {
    switch (sv.status) {
      case static_status::rejected:
        out.verdict = "rejected";
        break;
      case static_status::link_error:
        out.verdict = "link_error";
        break;
      default:
        out.verdict = "infra_error";
        break;
    }
    out.reason = sv.reason;
    if (!sv.findings.empty()) out.first_rule = std::string(rule_name(sv.findings.front().why));
    return out;
  }
  compile_options co;
  co.libraries = libs;
  co.cache_dir = cache_dir;
  co.time_limit = std::chrono::milliseconds(600'000);
  const auto cr = compile(tc, source, co);
  out.verdict = cr.ok() ? "compiled" : std::string(status_name(cr.status));
  out.reason = cr.reason;
  out.log = cr.log;
  if (cr.status == compile_status::rejected) {
    for (const auto& d : cr.diagnostics)
      if (d.level == severity::error && !d.code.empty()) {
        out.first_rule = d.code;
        break;
      }
  }
  return out;
}

}  // namespace

TEST_CASE("suite manifest: every candidate listed once, tasks built in, verdict names known") {
  const auto entries = load_suite();
  CHECK(entries.size() >= 30);

  std::set<std::string> listed;
  for (const auto& e : entries) {
    INFO("suite.jsonl line " << e.line << ": " << e.file);
    CHECK_MESSAGE(listed.insert(e.file).second, "listed twice");
    CHECK(fs::is_regular_file(suite_dir + "/" + e.file));
  }
  for (const auto& f : fs::directory_iterator(suite_dir))
    if (f.path().extension() == ".cu")
      CHECK_MESSAGE(listed.count(f.path().filename().string()) == 1,
                    f.path().filename().string() << " is not in suite.jsonl");

  const auto tasks = builtin_tasks();
  REQUIRE_MESSAGE(!tasks.empty(), "no built-in tasks found in " << builtin_dir);
  std::set<std::string> sole_verdicts;
  for (const auto& e : entries) {
    INFO("suite.jsonl line " << e.line << ": " << e.file);
    CHECK_MESSAGE(tasks.count(e.task) == 1, "task '" << e.task << "' is not a built-in task");
    CHECK_FALSE(e.why.empty());
    REQUIRE_FALSE(e.expect.empty());
    // A list names honest alternatives a GPU run decides between; a pre-run verdict is certain.
    for (const auto& v : e.expect) {
      CHECK_MESSAGE((pre_run.count(v) == 1 || run_time.count(v) == 1),
                    "unknown verdict '" << v << "'");
      if (e.expect.size() > 1) CHECK_MESSAGE(run_time.count(v) == 1, "'" << v << "' in a list");
    }
    CHECK(std::set<std::string>(e.expect.begin(), e.expect.end()).size() == e.expect.size());
    if (!e.rule.empty()) CHECK(e.expect == std::vector<std::string>{"rejected"});
    if (e.expect.size() == 1) sole_verdicts.insert(e.expect[0]);
  }
  // The suite exercises every verdict a candidate can earn.
  for (const auto* set : {&pre_run, &run_time})
    for (const auto& v : *set)
      CHECK_MESSAGE(sole_verdicts.count(v) == 1, "no '" << v << "' entry");
}

TEST_CASE("suite candidates get their pre-run verdicts from the static check and the compile") {
  static const auto tc = find_toolchain();
  if (!tc) {
    MESSAGE("skipped: no CUDA toolchain (" << tc.message() << ")");
    return;
  }
  const auto entries = load_suite();
  const auto tasks = builtin_tasks();

  const fs::path cache =
      fs::temp_directory_path() / ("kforge-suite-cache-" + std::to_string(::getpid()));
  fs::remove_all(cache);
  struct remove_at_end {
    fs::path p;
    ~remove_at_end() {
      std::error_code ec;
      fs::remove_all(p, ec);
    }
  } cleanup{cache};

  // Each candidate is a few seconds of nvcc: spread them over a few threads, assert afterwards
  // on this one.
  std::vector<pre_run_outcome> outcomes(entries.size());
  std::atomic<std::size_t> next{0};
  const unsigned workers = std::clamp(std::thread::hardware_concurrency(), 1u, 4u);
  std::vector<std::thread> pool;
  for (unsigned w = 0; w < workers; ++w)
    pool.emplace_back([&] {
      for (std::size_t i; (i = next++) < entries.size();) {
        const auto it = tasks.find(entries[i].task);
        outcomes[i] = evaluate_before_run(*tc, read_file(suite_dir + "/" + entries[i].file),
                                          it != tasks.end() && it->second, cache.string());
      }
    });
  for (auto& t : pool) t.join();

  for (std::size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    const auto& got = outcomes[i];
    INFO(e.file << " (" << e.task << "): " << e.why);
    INFO("got " << got.verdict << ": " << got.reason);
    INFO(got.log.substr(0, 4000));
    const bool decided_before_run = e.expect.size() == 1 && pre_run.count(e.expect[0]) == 1;
    if (decided_before_run) {
      CHECK(got.verdict == e.expect[0]);
      if (!e.rule.empty()) CHECK(got.first_rule == e.rule);
    } else {
      CHECK(got.verdict == "compiled");
    }
  }
}

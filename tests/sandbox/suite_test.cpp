// The GPU test suite (tests/sandbox/suite/) through the sandbox's CPU stages. Each suite
// entry names a candidate, a built-in task and the verdict the sandbox should give it. Here, with
// nvcc and no GPU: entries whose verdict is decided before anything runs (rejected, compile_error,
// link_error) must get exactly that verdict from the static check and the compile, in the order
// the sandbox applies them (the sandbox's own evaluator, without a run stage: static check with the
// preprocessed pass, then compile with its library check); every other entry must pass both, so that on a GPU host only the run
// stage decides it. The manifest itself is checked too: every .cu listed once, every task built
// in, every verdict name known.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/parallel.hpp"
#include "sandbox/compiler.hpp"
#include "sandbox/evaluator.hpp"
#include "sandbox/toolchain.hpp"
#include "suite_manifest.hpp"
#include "tasks/builtin.hpp"

using namespace kforge::sandbox;
using namespace kforge::sandbox::testing;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// Verdicts decided before the candidate runs, and those only a GPU run decides.
const std::set<std::string> pre_run = {"rejected", "compile_error", "link_error"};
const std::set<std::string> run_time = {"ok", "runtime_error", "timeout", "wrong_answer",
                                        "hack_suspected"};

// Built-in task id -> task.
std::map<std::string, kforge::tasks::task> builtin_tasks() {
  auto library = kforge::tasks::builtin_tasks();
  REQUIRE_MESSAGE(library.ok(), (library.ok() ? "" : library.message()));
  std::map<std::string, kforge::tasks::task> tasks;
  for (auto& t : *library) tasks.emplace(t.id, std::move(t));
  return tasks;
}

// What the sandbox decides before running a candidate (evaluator.cpp without a run stage): a
// pre-run verdict name, or "compiled".
struct pre_run_outcome {
  std::string verdict;
  std::string reason;
  std::string first_rule;  ///< the rule of the first error finding, when rejected
  std::string details;     ///< the diagnostics, for the failure message
};

pre_run_outcome evaluate_before_run(const evaluator& ev, const kforge::tasks::task& t,
                                    const std::string& source) {
  const auto v = ev.evaluate(t, source, {});
  pre_run_outcome out;
  out.verdict = kforge::wire::EnumNameVerdictStatus(v.status);
  out.reason = v.reason;
  for (const auto& d : v.diagnostics) {
    if (!d) continue;
    out.details += std::to_string(d->line) + ": " + d->code + " " + d->message + "\n";
    if (v.status == kforge::wire::VerdictStatus::rejected && out.first_rule.empty() &&
        d->severity == kforge::wire::Severity::error && !d->code.empty())
      out.first_rule = d->code;
  }
  return out;
}

}  // namespace

TEST_CASE("suite manifest: every candidate listed once, tasks built in, verdict names known") {
  const auto entries = load_suite();
  // The suite's coverage: honest kernels and the known attack and reward-hack classes, several
  // cases each. A shrinking suite fails here, not silently.
  CHECK(entries.size() >= 100);

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
  REQUIRE(!tasks.empty());
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
    // A speedup bound only means something for a candidate that may be timed, i.e. end ok.
    if (e.max_speedup > 0)
      CHECK_MESSAGE(std::find(e.expect.begin(), e.expect.end(), "ok") != e.expect.end(),
                    "max_speedup without ok among the expected verdicts");
    if (e.expect.size() == 1) sole_verdicts.insert(e.expect[0]);
  }
  // The suite exercises every verdict a candidate can earn.
  for (const auto* set : {&pre_run, &run_time})
    for (const auto& v : *set)
      CHECK_MESSAGE(sole_verdicts.count(v) == 1, "no '" << v << "' entry");
}

TEST_CASE("suite candidates get their pre-run verdicts from the static check and the compile") {
  if (const auto tc = find_toolchain(); !tc) {
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

  evaluator_options eo;
  eo.compile.cache_dir = cache.string();
  // Generous limits: the verdicts are under test here, not the speed of a loaded CI machine.
  eo.preprocess_time_limit = std::chrono::milliseconds(300'000);
  eo.compile.time_limit = std::chrono::milliseconds(600'000);
  auto ev = evaluator::create(eo);
  REQUIRE_MESSAGE(ev.ok(), (ev.ok() ? "" : ev.message()));

  // Each candidate is a few seconds of nvcc: spread them over a few threads, assert afterwards
  // on this one.
  std::vector<pre_run_outcome> outcomes(entries.size());
  const int threads = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 4u));
  kforge::parallel_for(entries.size(), threads, [&](std::size_t i) {
    const auto it = tasks.find(entries[i].task);
    if (it == tasks.end()) {
      outcomes[i].verdict = "unknown task " + entries[i].task;
      return;
    }
    outcomes[i] = evaluate_before_run(*ev, it->second, read_file(suite_dir + "/" + entries[i].file));
  });

  for (std::size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    const auto& got = outcomes[i];
    INFO(e.file << " (" << e.task << "): " << e.why);
    INFO("got " << got.verdict << ": " << got.reason);
    INFO(got.details.substr(0, 4000));
    const bool decided_before_run = e.expect.size() == 1 && pre_run.count(e.expect[0]) == 1;
    if (decided_before_run) {
      CHECK(got.verdict == e.expect[0]);
      if (!e.rule.empty()) CHECK(got.first_rule == e.rule);
    } else {
      CHECK(got.verdict == "compiled");
    }
  }
}

// The confinement attack set runs on a GPU host with the static checks off (the OS confinement
// alone must stop each attack); here its manifest is checked and every candidate must build with
// nvcc, or an attack that never compiled would pass there as a "stopped" one. These candidates
// include libc headers and call what the static checks forbid, so the compile's library check may
// reject the built library: `rejected` (the library check ran on a built .so) counts as built;
// a compile or link error does not.
TEST_CASE("confinement attacks: every candidate listed once with a unique attack, and each builds") {
  const auto attacks = load_attacks();
  CHECK(attacks.size() >= 9);
  std::set<std::string> files, names;
  for (const auto& a : attacks) {
    INFO("attacks.jsonl line " << a.line << ": " << a.file);
    CHECK_MESSAGE(files.insert(a.file).second, "listed twice");
    CHECK_MESSAGE(names.insert(a.attack).second, "attack name '" << a.attack << "' used twice");
    CHECK_FALSE(a.attack.empty());
    CHECK_FALSE(a.why.empty());
    CHECK(fs::is_regular_file(confinement_dir + "/" + a.file));
  }
  for (const auto& f : fs::directory_iterator(confinement_dir))
    if (f.path().extension() == ".cu")
      CHECK_MESSAGE(files.count(f.path().filename().string()) == 1,
                    f.path().filename().string() << " is not in attacks.jsonl");

  const auto tc = find_toolchain();
  if (!tc) {
    MESSAGE("compiles skipped: no CUDA toolchain (" << tc.message() << ")");
    return;
  }
  std::vector<compile_result> built(attacks.size());
  const int threads = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 4u));
  kforge::parallel_for(attacks.size(), threads, [&](std::size_t i) {
    compile_options opt;  // no cache: each library lives in a private directory
    opt.time_limit = std::chrono::milliseconds(600'000);
    built[i] = compile(*tc, read_file(confinement_dir + "/" + attacks[i].file), opt);
  });
  for (std::size_t i = 0; i < attacks.size(); ++i) {
    INFO(attacks[i].file << ": " << status_name(built[i].status) << ": " << built[i].reason);
    INFO(built[i].log.substr(0, 4000));
    CHECK((built[i].status == compile_status::ok || built[i].status == compile_status::rejected));
  }
}

// The sandbox supervisor on CPU: the run stage's process handling and verdict mapping, driven
// against a scripted stand-in for both children (fake/fake_sandbox_child.sh), plus the plain
// parts (check planning, trial statistics, the hidden-work cross-check, eval summaries).
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include "../tasks/task_builders.hpp"
#include "sandbox/eval_command.hpp"
#include "sandbox/process_memory.hpp"
#include "sandbox/runner.hpp"
#include "sandbox/timing_stats.hpp"

namespace ks = kforge::sandbox;
using kforge::wire::VerdictStatus;

namespace {

kforge::tasks::task fake_task(const std::string& id) {
  return kforge::tasks::testing::parse_or_fail(kforge::tasks::testing::two_input_task(
      id, "fake", "def forward(x, y):\n    return x + y\n", {4}, {2}));
}

// A "library" for the fake child: an empty file whose name is the behaviour the fake acts out
// (the runner copies it into the child's lib/ folder as N-NAME, so the real path must exist).
std::string fake_lib(const std::string& mode) {
  const auto dir = std::filesystem::temp_directory_path() / "kforge-fake-libs";
  std::filesystem::create_directories(dir);
  const auto path = dir / mode;
  if (!std::filesystem::exists(path)) std::ofstream(path) << "";
  return path.string();
}

std::shared_ptr<ks::gpu_slot> fake_slot(int time_limit_ms = 3000, double slow_cutoff = 20.0, bool confine = true) {
  ks::run_options o;
  o.confine = confine;
  o.slow_cutoff = slow_cutoff;
  o.program = std::string(KFORGE_TEST_DATA) + "/fake/fake_sandbox_child.sh";
  o.time_limit = std::chrono::milliseconds(time_limit_ms);
  o.start_time_limit = std::chrono::milliseconds(10'000);
  o.reference_time_limit = std::chrono::milliseconds(10'000);
  o.probe_library = fake_lib("probe");
  o.max_output = 1024;
  o.gpu = 5;
  return std::make_shared<ks::gpu_slot>(o);
}

}  // namespace

TEST_CASE("plan_checks: at least three input sets, primary twice, then the variants") {
  auto t = fake_task("fake/a");
  auto checks = ks::plan_checks(t, 42, 4);
  REQUIRE(checks.size() == 3);
  CHECK(checks[0].variant == -1);
  CHECK(checks[1].variant == -1);
  CHECK(checks[2].variant == 0);
  CHECK(checks[0].seed != checks[1].seed);
  CHECK(ks::plan_checks(t, 43, 4)[0].seed != checks[0].seed);
  t.variants.clear();
  checks = ks::plan_checks(t, 42, 4);
  REQUIRE(checks.size() == 3);
  CHECK(checks[2].variant == -1);
}

TEST_CASE("the per-process memory meter names why it cannot read a GPU") {
  // No GPU has this bus ID; on a host without the driver NVML itself is missing.
  const auto meter = ks::process_memory_meter::open("ffff:ff:1f.7");
  REQUIRE_FALSE(meter.ok());
  const std::string why = meter.message();
  INFO(why);
  CHECK((why.find("NVML is not available") == 0 || why.find("NVML has no GPU at ffff:ff:1f.7") == 0 ||
         why.find("NVML init") == 0));
}

TEST_CASE("trial statistics and the hidden-work cross-check") {
  const auto s = ks::summarize_trials({4, 1, 3, 2, 5});
  CHECK(s.median_ms == doctest::Approx(3));
  CHECK(s.p25_ms == doctest::Approx(2));
  CHECK(s.p75_ms == doctest::Approx(4));
  CHECK(s.trials == 5);
  CHECK(ks::summarize_trials({}).trials == 0);
  CHECK(ks::hidden_work({1, 1, 1}, {1.05, 1.02, 1.04}).empty());
  CHECK(ks::hidden_work({0.01, 0.01, 0.01}, {0.03, 0.03, 0.04}).empty());  // launch overhead
  CHECK(ks::hidden_work({0.01, 0.01, 0.01}, {3, 3, 3}).find("outside the given stream") !=
        std::string::npos);
}

TEST_CASE("the supervisor maps each kind of child behaviour to its verdict and survives it") {
  auto slot = fake_slot();
  ks::runner r(slot);
  const auto t = fake_task("fake/a");

  SUBCASE("a correct candidate: ok, three input sets, interleaved timings") {
    const auto o = r.run(t, fake_lib("ok"), 1);
    CHECK_MESSAGE(o.status == VerdictStatus::ok, o.reason);
    CHECK(o.checks == 3);
    CHECK(o.candidate.trials == 30);
    CHECK(o.baseline.trials == 30);
    CHECK(o.candidate.median_ms == doctest::Approx(1.0));
    CHECK(o.baseline.median_ms == doctest::Approx(2.0));
    CHECK(o.audit.empty());
  }
  SUBCASE("a hang is a timeout, and the next candidate runs in a fresh child") {
    const auto o = r.run(t, fake_lib("hang"), 1);
    CHECK(o.status == VerdictStatus::timeout);
    CHECK(o.reason.find("limit") != std::string::npos);
    CHECK(r.run(t, fake_lib("ok"), 1).status == VerdictStatus::ok);
  }
  SUBCASE("a crash is a runtime_error naming the signal") {
    // Unconfined: the fake child is PID 1 of its namespace when confined, and a signal it sends
    // itself cannot kill that (a real fault can).
    ks::runner u(fake_slot(3000, 20.0, false));
    const auto o = u.run(t, fake_lib("crash"), 1);
    CHECK(o.status == VerdictStatus::runtime_error);
    CHECK_MESSAGE(o.reason.find("signal 11") != std::string::npos, o.reason);
    CHECK(u.run(t, fake_lib("ok"), 1).status == VerdictStatus::ok);
  }
  SUBCASE("a malformed reply is the candidate's hack_suspected") {
    CHECK(r.run(t, fake_lib("garbage"), 1).status == VerdictStatus::hack_suspected);
    CHECK(r.run(t, fake_lib("ok"), 1).status == VerdictStatus::ok);
  }
  SUBCASE("an output flood is cut to the bound and does not block the child") {
    const auto o = r.run(t, fake_lib("flood"), 1);
    CHECK(o.status == VerdictStatus::ok);
    CHECK(o.output.size() < 1200);
    CHECK(o.output.find("dropped") != std::string::npos);
  }
  SUBCASE("wrong answers, cached results, mutated inputs, hidden work") {
    const auto wrong = r.run(t, fake_lib("wrong"), 1);
    CHECK(wrong.status == VerdictStatus::wrong_answer);
    CHECK(wrong.first_bad_index == 3);
    CHECK(wrong.max_abs_error == doctest::Approx(0.5));
    const auto stale = r.run(t, fake_lib("stale"), 1);
    CHECK(stale.status == VerdictStatus::hack_suspected);
    CHECK(stale.reason.find("cached") != std::string::npos);
    CHECK(r.run(t, fake_lib("mutate"), 1).status == VerdictStatus::hack_suspected);
    const auto hidden = r.run(t, fake_lib("hidden"), 1);
    CHECK(hidden.status == VerdictStatus::hack_suspected);
    CHECK(hidden.reason.find("outside the given stream") != std::string::npos);
    // The server reads, and the runner deletes, the files a reply names: only the check's own. The
    // fake names this file instead of its output; it must be neither compared nor deleted.
    const std::string target = "/tmp/kforge-forged-target";
    std::ofstream(target) << "ok";
    const auto forged = r.run(t, fake_lib("forged"), 1);
    CHECK(forged.status == VerdictStatus::hack_suspected);
    CHECK(forged.reason.find("named files other than its outputs") != std::string::npos);
    CHECK(std::filesystem::exists(target));
    std::filesystem::remove(target);
    // Outputs over CUDA IPC: a handle the server cannot open means the same check again as files
    // (a host without IPC still gets verdicts); a reply no honest child sends is the candidate's.
    const auto ipc = r.run(t, fake_lib("ipc"), 1);
    CHECK_MESSAGE(ipc.status == VerdictStatus::ok, ipc.reason);
    const auto ipcbad = r.run(t, fake_lib("ipcbad"), 1);
    CHECK(ipcbad.status == VerdictStatus::hack_suspected);
    CHECK(ipcbad.reason.find("0 output handles") != std::string::npos);
  }
  SUBCASE("the child's environment is scrubbed") {
    ::setenv("KFORGE_TEST_SECRET", "hunter2", 1);
    const auto o = r.run(t, fake_lib("env"), 1);
    ::unsetenv("KFORGE_TEST_SECRET");
    CHECK_MESSAGE(o.status == VerdictStatus::ok, o.reason);
  }
  SUBCASE("a reference server that dies is infra_error, never the candidate's fault") {
    const auto o = r.run(fake_task("fake/refdie"), fake_lib("ok"), 1);
    CHECK(o.status == VerdictStatus::infra_error);
    CHECK(r.run(t, fake_lib("ok"), 1).status == VerdictStatus::ok);
  }
}

TEST_CASE("the control channel carries the child's replies and nothing else") {
  // Each line candidate code could write on fd 3 (a second reply, a line before a request, a reply
  // without the request's nonce) condemns the candidate, and the child is not reused.
  auto slot = fake_slot();
  ks::runner r(slot);
  const auto t = fake_task("fake/a");
  for (const char* mode : {"second", "unasked", "nonce"}) {
    INFO(mode);
    const auto o = r.run(t, fake_lib(mode), 1);
    CHECK(o.status == VerdictStatus::hack_suspected);
    CHECK_MESSAGE(o.reason.find("protocol") != std::string::npos, o.reason);
    const auto next = r.run(t, fake_lib("ok"), 1);
    CHECK_MESSAGE(next.status == VerdictStatus::ok, next.reason);
  }
  // A reply that lacks what it must hold condemns the candidate; the supervisor carries on.
  const auto malformed = r.run(t, fake_lib("nofields"), 1);
  CHECK(malformed.status == VerdictStatus::hack_suspected);
  CHECK_MESSAGE(malformed.reason.find("malformed reply") != std::string::npos, malformed.reason);
  CHECK(r.run(t, fake_lib("ok"), 1).status == VerdictStatus::ok);
  // A process killed by SIGSYS made a call the seccomp filter forbids. (Unconfined: the fake
  // child would be PID 1 of its namespace, which a signal it sends itself cannot kill.)
  ks::runner unconfined(fake_slot(3000, 20.0, false));
  const auto killed = unconfined.run(t, fake_lib("sigsys"), 1);
  CHECK(killed.status == VerdictStatus::hack_suspected);
  CHECK_MESSAGE(killed.reason.find("seccomp") != std::string::npos, killed.reason);
}

TEST_CASE("timing: the last timed trial's outputs are checked, and large speedups re-timed") {
  auto slot = fake_slot();
  ks::runner r(slot);
  const auto t = fake_task("fake/a");  // the fake baseline: 2 ms a trial
  SUBCASE("right when checked, wrong when timed") {
    const auto o = r.run(t, fake_lib("timedwrong"), 1);
    CHECK(o.status == VerdictStatus::hack_suspected);
    CHECK_MESSAGE(o.reason.find("last timed trial") != std::string::npos, o.reason);
  }
  SUBCASE("20x in the rotation, 1x on fresh inputs in a fresh child: ok, timing withheld") {
    const auto o = r.run(t, fake_lib("fast"), 1);
    CHECK_MESSAGE(o.status == VerdictStatus::ok, o.reason);
    CHECK(o.candidate.trials == 0);
    CHECK(o.baseline.trials == 30);
    CHECK_MESSAGE(o.reason.find("not confirmed") != std::string::npos, o.reason);
    CHECK(o.audit.find("20.0x") != std::string::npos);
  }
  SUBCASE("20x confirmed by the re-timing: kept") {
    const auto o = r.run(t, fake_lib("fastsure"), 1);
    CHECK_MESSAGE(o.status == VerdictStatus::ok, o.reason);
    CHECK(o.candidate.median_ms == doctest::Approx(0.1));
    CHECK_MESSAGE(o.reason.find("confirmed by re-timing") != std::string::npos, o.reason);
  }
}

TEST_CASE("a kernel far slower than the baseline is timed in 3 trials, and its reason says so") {
  const auto t = fake_task("fake/a");  // the fake baseline: 2 ms a trial; the crawl: 100 ms
  {
    ks::runner r(fake_slot());  // cutoff 20: over 40 ms is cut
    const auto o = r.run(t, fake_lib("crawl"), 1);
    CHECK_MESSAGE(o.status == VerdictStatus::ok, o.reason);
    CHECK(o.candidate.trials == 3);
    CHECK(o.baseline.trials == 10);  // the first round's, timed before the candidate's
    CHECK(o.candidate.median_ms == doctest::Approx(100.0));
    CHECK(o.reason.find("timed in 3 trials, not 30") != std::string::npos);
    CHECK(o.reason.find("sandbox.slow_cutoff") != std::string::npos);
    const auto fast = r.run(t, fake_lib("ok"), 1);  // 1 ms: every trial
    CHECK(fast.candidate.trials == 30);
    CHECK(fast.reason.empty());
  }
  {
    ks::runner r(fake_slot(3000, 100.0));  // over 200 ms: the crawl is not cut
    CHECK(r.run(t, fake_lib("crawl"), 1).candidate.trials == 30);
  }
  {
    ks::runner r(fake_slot(3000, 0.0));  // never cut
    const auto o = r.run(t, fake_lib("crawl"), 1);
    CHECK(o.candidate.trials == 30);
    CHECK(o.baseline.trials == 30);
  }
}

TEST_CASE("waiting for the GPU between a candidate's checks does not use up its time limit") {
  // Another runner times (the exclusive lock) from just after this candidate's first check until
  // past its 3 s limit: its next checks wait for the GPU, and that wait is not its time.
  auto slot = fake_slot(3000);
  ks::runner r(slot);
  REQUIRE(r.start().ok());
  std::atomic<bool> held{false};
  std::thread timer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // inside the first 0.5 s check
    ks::gpu_slot::gpu_lock timing(*slot, true);
    held = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(3500));
  });
  const auto o = r.run(fake_task("fake/a"), fake_lib("slow"), 1);
  timer.join();
  CHECK(held);
  CHECK_MESSAGE(o.status == VerdictStatus::ok, o.reason);
  CHECK(o.checks == 3);
}

TEST_CASE("a candidate of a task too large to share the GPU's memory waits until it runs alone, then its set goes") {
  // The fake GPU has 150 GB: 90 GB for candidates (memory_share 0.6). The large task's footprint
  // (4 x 48 GB of inputs and output) is more than that, so it waits for the claim held here.
  auto slot = fake_slot(3000);
  ks::runner r(slot);
  REQUIRE(r.start().ok());
  const auto large = kforge::tasks::testing::parse_or_fail(kforge::tasks::testing::two_input_task(
      "fake/large", "fake", "def forward(x, y):\n    return x + y\n", {4'000'000'000}, {2}));
  using clock = std::chrono::steady_clock;
  SUBCASE("a small task runs beside another candidate's claim") {
    ks::memory_gate::claim other(slot->memory(), std::int64_t{60} << 30);
    const auto since = clock::now();
    CHECK(r.run(fake_task("fake/a"), fake_lib("ok"), 1).status == VerdictStatus::ok);
    CHECK(clock::now() - since < std::chrono::milliseconds(1000));
    CHECK(slot->phases().expected_releases == 0);  // a small task's set stays cached
  }
  SUBCASE("the large one waits for it") {
    std::optional<ks::memory_gate::claim> other;
    other.emplace(slot->memory(), 1);
    std::thread release([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(1000));
      other.reset();
    });
    const auto since = clock::now();
    const auto o = r.run(large, fake_lib("ok"), 1);
    const auto took = clock::now() - since;
    release.join();
    CHECK_MESSAGE(o.status == VerdictStatus::ok, o.reason);
    CHECK(took >= std::chrono::milliseconds(900));
    CHECK(slot->memory().claimed() == 0);
    // Done, it had its server let go of the large set before the next candidate was admitted.
    CHECK(slot->phases().expected_releases == 1);
  }
}

TEST_CASE("eval summary: correctness rate, fast_p and the geometric mean over correct ones") {
  using nlohmann::json;
  const std::vector<json> v = {
      {{"status", "ok"}, {"speedup", 2.0}},   {{"status", "ok"}, {"speedup", 0.5}},
      {{"status", "ok"}, {"speedup", 1.2}},   {{"status", "wrong_answer"}},
      {{"status", "compile_error"}},
  };
  const auto s = ks::summarize_verdicts(v);
  CHECK(s["candidates"] == 5);
  CHECK(s["correct"] == 3);
  CHECK(s["correctness_rate"].get<double>() == doctest::Approx(0.6));
  CHECK(s["fast_p"]["fast_0"].get<double>() == doctest::Approx(0.6));
  CHECK(s["fast_p"]["fast_1"].get<double>() == doctest::Approx(0.4));
  CHECK(s["fast_p"]["fast_1.5"].get<double>() == doctest::Approx(0.2));
  CHECK(s["fast_p"]["fast_2"].get<double>() == doctest::Approx(0.0));
  CHECK(s["geomean_speedup"].get<double>() == doctest::Approx(std::cbrt(2.0 * 0.5 * 1.2)));
  CHECK(s["counts"]["wrong_answer"] == 1);
  CHECK(s["median_speedup"].get<double>() == doctest::Approx(1.2));
  CHECK(ks::format_summary(s).find("fast_p") != std::string::npos);
}

TEST_CASE("eval: candidates out of memory are judged once more, one at a time, and the second verdict stands") {
  std::vector<nlohmann::json> v{
      {{"task", "a"}, {"status", "ok"}, {"speedup", 1.1}},
      {{"task", "b"}, {"status", "infra_error"}, {"reason", "reference server: CUDA out of memory"}},
      {{"task", "c"}, {"status", "wrong_answer"}},
      {{"task", "d"}, {"status", "infra_error"}, {"reason", "sandbox child: CUDA out of memory"}},
      {{"task", "e"}, {"status", "infra_error"}, {"reason", "nvcc not found"}},  // would fail again
  };
  std::vector<std::size_t> judged;
  const auto n = ks::retry_infra_alone(v, [&](std::size_t i) {
    judged.push_back(i);
    return i == 1 ? nlohmann::json{{"task", "b"}, {"status", "ok"}, {"speedup", 2.0}}
                  : nlohmann::json{{"task", "d"}, {"status", "infra_error"}, {"reason", "out of memory again"}};
  });
  CHECK(n == 2);
  CHECK(judged == std::vector<std::size_t>{1, 3});  // in order, one after another
  CHECK(v[0].count("retried_alone") == 0);
  CHECK(v[1]["status"] == "ok");
  CHECK(v[1]["retried_alone"] == true);
  CHECK(v[1]["first_reason"] == "reference server: CUDA out of memory");
  CHECK(v[3]["status"] == "infra_error");
  CHECK(v[3]["reason"] == "out of memory again");
  CHECK(v[4].count("retried_alone") == 0);
  const auto s = ks::summarize_verdicts(v);
  CHECK(s["correct"] == 2);
}

TEST_CASE("eval summary per task, as the field counts: best of a task's samples and their mean, by level") {
  using nlohmann::json;
  // kb/l1/a: samples 2.0x and wrong; l1/b: 0.5x and 0.8x; kb/l2/c: only wrong.
  const std::vector<json> v = {
      {{"task", "kb/l1/a"}, {"category", "gemm"}, {"status", "ok"}, {"speedup", 2.0}},
      {{"task", "kb/l1/a"}, {"category", "gemm"}, {"status", "wrong_answer"}},
      {{"task", "l1/b"}, {"category", "reduction"}, {"status", "ok"}, {"speedup", 0.5}},
      {{"task", "l1/b"}, {"category", "reduction"}, {"status", "ok"}, {"speedup", 0.8}},
      {{"task", "kb/l2/c"}, {"category", "gemm"}, {"status", "compile_error"}},
  };
  const auto s = ks::summarize_verdicts(v);
  const auto& t = s["per_task"];
  CHECK(t["tasks"] == 3);
  CHECK(t["correct_best_of_samples"].get<double>() == doctest::Approx(2.0 / 3));
  CHECK(t["correct_mean_over_samples"].get<double>() == doctest::Approx((0.5 + 1.0 + 0.0) / 3));
  CHECK(t["fast_p_best_of_samples"]["fast_1"].get<double>() == doctest::Approx(1.0 / 3));
  CHECK(t["fast_p_mean_over_samples"]["fast_1"].get<double>() == doctest::Approx(0.5 / 3));
  CHECK(t["fast_p_best_of_samples"]["fast_0"].get<double>() == doctest::Approx(2.0 / 3));
  // By level: l1 holds a and b, l2 holds c.
  CHECK(s["by_level"]["l1"]["tasks"] == 2);
  CHECK(s["by_level"]["l1"]["correct_best_of_samples"].get<double>() == doctest::Approx(1.0));
  CHECK(s["by_level"]["l2"]["correct_best_of_samples"].get<double>() == doctest::Approx(0.0));
  CHECK(t["geomean_speedup"].get<double>() == doctest::Approx(std::cbrt(2.0 * 0.5 * 0.8)));
  CHECK(t["median_speedup"].get<double>() == doctest::Approx(0.8));
  CHECK(s["by_level"]["l1"]["median_speedup"].get<double>() == doctest::Approx(0.8));
  // By category: gemm holds a and c (one of two solved, its one correct kernel at 2x), reduction b.
  CHECK(s["by_category"]["gemm"]["tasks"] == 2);
  CHECK(s["by_category"]["gemm"]["correct_best_of_samples"].get<double>() == doctest::Approx(0.5));
  CHECK(s["by_category"]["gemm"]["geomean_speedup"].get<double>() == doctest::Approx(2.0));
  CHECK(s["by_category"]["reduction"]["correct_mean_over_samples"].get<double>() == doctest::Approx(1.0));
  CHECK(s["by_category"]["reduction"]["geomean_speedup"].get<double>() == doctest::Approx(std::sqrt(0.4)));
  CHECK(ks::format_summary(s).find("per task: 3 task(s)") != std::string::npos);
  CHECK(ks::format_summary(s).find("  gemm: 2 task(s)") != std::string::npos);
}

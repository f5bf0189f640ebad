// Nsight Compute profiles of correct kernels on CPU (sandbox/ncu_profiler.hpp): finding ncu, its
// command line, what its output means (a report, no permission, past the time limit), when the
// manifest asks for profiles, and the runner's whole profile step driven against the scripted
// child (fake/fake_sandbox_child.sh) under a scripted ncu that runs it the way ncu runs its
// target and then prints a report in `ncu --csv` form.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../tasks/task_builders.hpp"
#include "config/options/sandbox_options.hpp"
#include "sandbox/ncu_profiler.hpp"
#include "sandbox/runner.hpp"
#include "sandbox/verdict_encoding.hpp"
#include "sandbox/verdict_json.hpp"

namespace fs = std::filesystem;
namespace ks = kforge::sandbox;
using kforge::wire::VerdictStatus;

namespace {

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Two launches of a report as `ncu --csv --page details` prints it (the columns the parser reads;
// ncu prints more), the second the slower, with the CPIStall rule naming its top stall.
const char* const report_csv =
    "\"ID\",\"Process ID\",\"Kernel Name\",\"Section Name\",\"Metric Name\",\"Metric Unit\",\"Metric Value\",\"Rule Name\",\"Rule Type\",\"Rule Description\"\n"
    "\"0\",\"7\",\"pad_kernel\",\"GPU Speed Of Light Throughput\",\"Duration\",\"ns\",\"2,048\",\"\",\"\",\"\"\n"
    "\"1\",\"7\",\"rows_kernel(float const*, float*)\",\"GPU Speed Of Light Throughput\",\"DRAM Throughput\",\"%\",\"81.40\",\"\",\"\",\"\"\n"
    "\"1\",\"7\",\"rows_kernel(float const*, float*)\",\"GPU Speed Of Light Throughput\",\"Duration\",\"us\",\"241.50\",\"\",\"\",\"\"\n"
    "\"1\",\"7\",\"rows_kernel(float const*, float*)\",\"GPU Speed Of Light Throughput\",\"Compute (SM) Throughput\",\"%\",\"22.90\",\"\",\"\",\"\"\n"
    "\"1\",\"7\",\"rows_kernel(float const*, float*)\",\"Occupancy\",\"Achieved Occupancy\",\"%\",\"47.20\",\"\",\"\",\"\"\n"
    "\"1\",\"7\",\"rows_kernel(float const*, float*)\",\"WarpStateStats\",\"\",\"\",\"\",\"CPIStall\",\"OPT\",\"On average, each warp of this workload spends 20.1 cycles being stalled waiting for a scoreboard dependency on a L1TEX (local, global, surface, texture) operation. This stall type represents about 61.0% of the total average of 33.0 cycles between issuing two instructions.\"\n";

const char* const permission_error =
    "==PROF== Connected to process 7 (/usr/bin/kforge)\n"
    "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters on the "
    "target device 0. For instructions on enabling permissions, see https://developer.nvidia.com/ERR_NVGPUCTRPERM\n";

/// A folder of its own for each fake ncu, holding a report and a permission error for it to print
/// (the confined child sees the folder read-only, as it would ncu's own; $here in `after_target`).
std::string fake_ncu(const std::string& name, const std::string& after_target) {
  const fs::path dir = fs::temp_directory_path() / ("kforge-fake-ncu-" + name);
  fs::create_directories(dir);
  std::ofstream(dir / "report.csv") << "==PROF== Connected to process 7\n" << report_csv << "==PROF== Disconnected\n";
  std::ofstream(dir / "denied.txt") << permission_error;
  const fs::path path = dir / "ncu";
  // ncu takes its options, then the program and its arguments: it starts the program (which
  // inherits fd 3, the sandbox child's control channel), waits for it, then prints its report.
  std::ofstream(path) << "#!/usr/bin/env bash\n"
                         "here=$(dirname \"$0\")\n"
                         "while [[ $# -gt 0 && $1 != */fake_sandbox_child.sh ]]; do shift; done\n"
                         "\"$@\"\n"
                      << after_target;
  ::chmod(path.c_str(), 0755);
  return path.string();
}

kforge::tasks::task fake_task(const std::string& id) {
  return kforge::tasks::testing::parse_or_fail(kforge::tasks::testing::two_input_task(
      id, "fake", "def forward(x, y):\n    return x + y\n", {4}, {2}));
}

std::string fake_lib(const std::string& mode) {
  const auto dir = fs::temp_directory_path() / "kforge-fake-libs";
  fs::create_directories(dir);
  const auto path = dir / mode;
  if (!fs::exists(path)) std::ofstream(path) << "";
  return path.string();
}

std::shared_ptr<ks::gpu_slot> profiling_slot(const std::string& ncu, int limit_ms = 10'000) {
  ks::run_options o;
  o.program = std::string(KFORGE_TEST_DATA) + "/fake/fake_sandbox_child.sh";
  o.time_limit = std::chrono::milliseconds(3000);
  o.start_time_limit = std::chrono::milliseconds(10'000);
  o.reference_time_limit = std::chrono::milliseconds(10'000);
  o.probe_library = fake_lib("probe");
  o.max_output = 1024;
  o.gpu = 5;
  o.profile = true;
  o.ncu = ncu;
  o.ncu_missing = ncu.empty() ? "ncu not found (looked at nowhere)" : "";
  o.profile_time_limit = std::chrono::milliseconds(limit_ms);
  return std::make_shared<ks::gpu_slot>(o);
}

}  // namespace

TEST_CASE("ncu's command line: the parser's sections, one call's kernels, then the program") {
  const auto cmd = ks::ncu_command("/opt/ncu/ncu", {"/usr/bin/kforge", "sandbox-child"}, 16);
  const std::vector<std::string> expected = {
      "/opt/ncu/ncu", "--csv", "--page", "details", "--section", "SpeedOfLight", "--section", "Occupancy",
      "--section", "WarpStateStats", "--section", "LaunchStats", "--profile-from-start", "off", "--launch-count", "16",
      "--target-processes", "application-only", "/usr/bin/kforge", "sandbox-child"};
  CHECK(cmd == expected);
}

TEST_CASE("finding ncu: a configured path only there, else PATH; a miss says where it looked") {
  const auto missing = ks::find_ncu("/nonexistent/ncu");
  REQUIRE_FALSE(missing.ok());
  CHECK(has(missing.message(), "ncu not found at /nonexistent/ncu"));

  const std::string fake = fake_ncu("find", "");
  const auto configured = ks::find_ncu(fake);
  REQUIRE(configured.ok());
  CHECK(*configured == fake);
  CHECK(ks::ncu_install_dir(fake) == fs::path(fake).parent_path().string());

  const std::string old_path = std::getenv("PATH") ? std::getenv("PATH") : "";
  const char* old_env = std::getenv("KFORGE_NCU");
  const std::string saved_env = old_env ? old_env : "";
  ::unsetenv("KFORGE_NCU");
  ::setenv("PATH", (fs::path(fake).parent_path().string() + ":/nonexistent-bin").c_str(), 1);
  const auto on_path = ks::find_ncu("");
  ::setenv("PATH", "/nonexistent-bin", 1);
  const auto nowhere = ks::find_ncu("");
  ::setenv("PATH", old_path.c_str(), 1);
  if (old_env) ::setenv("KFORGE_NCU", saved_env.c_str(), 1);
  REQUIRE(on_path.ok());
  CHECK(*on_path == fake);
  if (fs::exists("/usr/local/cuda/bin/ncu")) {  // a GPU host: the fixed place is the last resort
    CHECK(nowhere.ok());
  } else {
    REQUIRE_FALSE(nowhere.ok());
    CHECK(has(nowhere.message(), "$KFORGE_NCU, PATH and /usr/local/cuda/bin"));
    CHECK(has(nowhere.message(), "/nonexistent-bin/ncu"));
  }
}

TEST_CASE("ncu's output: the slowest kernel, no permission, past the limit, no report") {
  const auto limit = std::chrono::milliseconds(5000);
  const auto ok = ks::read_ncu_output(std::string("the program's own line\n") + report_csv, false, limit);
  REQUIRE_MESSAGE(ok.profile.has_value(), ok.skipped);
  CHECK(ok.skipped.empty());
  CHECK(ok.profile->kernel == "rows_kernel(float const*, float*)");
  CHECK(ok.profile->duration_us == doctest::Approx(241.5));
  CHECK(ok.profile->achieved_occupancy_pct == doctest::Approx(47.2));
  REQUIRE(ok.profile->stalls.size() == 1);
  CHECK(ok.profile->stalls[0].second == doctest::Approx(61.0));

  const auto denied = ks::read_ncu_output(permission_error, false, limit);
  CHECK_FALSE(denied.profile.has_value());
  CHECK(denied.denied);
  CHECK(has(denied.skipped, "ERR_NVGPUCTRPERM"));
  // Older releases say it in words only.
  CHECK(ks::read_ncu_output("==ERROR== The user does not have permission to profile on the target device.\n", false, limit).denied);

  const auto late = ks::read_ncu_output(report_csv, true, limit);
  CHECK_FALSE(late.profile.has_value());
  CHECK_FALSE(late.denied);
  CHECK(has(late.skipped, "5000 ms limit"));

  const auto none = ks::read_ncu_output("==PROF== Connected\n==ERROR== Failed to connect to process 7.\n", false, limit);
  CHECK_FALSE(none.profile.has_value());
  CHECK_FALSE(none.denied);
  CHECK(has(none.skipped, "no CSV header"));
  CHECK(has(none.skipped, "==ERROR== Failed to connect to process 7."));
  const auto silent = ks::read_ncu_output("==PROF== Connected\n==PROF== Disconnected\n", false, limit);
  CHECK(has(silent.skipped, "ncu's output ended: ==PROF== Connected | ==PROF== Disconnected"));
}

TEST_CASE("when the manifest asks for profiles: episodes that show them, always, never") {
  using kforge::sandbox_profile_mode;
  CHECK_FALSE(kforge::sandbox_profiles_wanted(sandbox_profile_mode::episodes, 1, {}));
  CHECK(kforge::sandbox_profiles_wanted(sandbox_profile_mode::episodes, 3, {}));
  CHECK(kforge::sandbox_profiles_wanted(sandbox_profile_mode::episodes, 3, {"timing", "profile"}));
  CHECK_FALSE(kforge::sandbox_profiles_wanted(sandbox_profile_mode::episodes, 3, {"compile", "timing"}));
  CHECK(kforge::sandbox_profiles_wanted(sandbox_profile_mode::always, 1, {"compile"}));
  CHECK_FALSE(kforge::sandbox_profiles_wanted(sandbox_profile_mode::off, 8, {"profile"}));
}

TEST_CASE("the runner profiles a correct kernel under ncu; the profile reaches the verdict") {
  const auto t = fake_task("fake/a");
  SUBCASE("a report: the slowest kernel in the verdict, its time counted") {
    auto slot = profiling_slot(fake_ncu("ok", "cat \"$here/report.csv\"\n"));
    ks::runner r(slot);
    const auto o = r.run(t, fake_lib("ok"), 1);
    REQUIRE_MESSAGE(o.status == VerdictStatus::ok, o.reason);
    REQUIRE_MESSAGE(o.profile.has_value(), o.profile_skipped);
    CHECK(o.profile->kernel == "rows_kernel(float const*, float*)");
    CHECK(o.profile->dram_throughput_pct == doctest::Approx(81.4));
    CHECK(o.profile_skipped.empty());
    CHECK(o.profile_ms > 0);
    CHECK(slot->phases().profiles == 1);
    CHECK(slot->phases().profile_ms == doctest::Approx(o.profile_ms));

    kforge::wire::VerdictT v;
    ks::encode_run(o, v);
    REQUIRE(v.profile);
    CHECK(v.profile->sm_throughput_pct == doctest::Approx(22.9));
    REQUIRE(v.profile->stalls.size() == 1);
    CHECK(has(v.profile->stalls[0]->reason, "waiting for a scoreboard dependency"));
    const auto back = ks::profile_of(v);
    REQUIRE(back.has_value());
    CHECK(back->achieved_occupancy_pct == doctest::Approx(47.2));
    const auto j = ks::verdict_json(v);
    CHECK(j.at("profile").at("kernel") == "rows_kernel(float const*, float*)");
    CHECK(j.at("profile_ms").get<double>() > 0);

    // A wrong kernel is never profiled.
    const auto wrong = r.run(t, fake_lib("wrong"), 1);
    CHECK(wrong.status == VerdictStatus::wrong_answer);
    CHECK_FALSE(wrong.profile.has_value());
    CHECK(wrong.profile_skipped.empty());
    CHECK(slot->phases().profiles == 1);
  }
  SUBCASE("no permission: no profile, the reason, and no further attempts on the slot") {
    auto slot = profiling_slot(fake_ncu("perm", "cat \"$here/denied.txt\"\nexit 1\n"));
    ks::runner r(slot);
    const auto o = r.run(t, fake_lib("ok"), 1);
    CHECK_MESSAGE(o.status == VerdictStatus::ok, o.reason);
    CHECK_FALSE(o.profile.has_value());
    CHECK(has(o.profile_skipped, "ERR_NVGPUCTRPERM"));
    const auto again = r.run(t, fake_lib("ok"), 2);
    CHECK(again.status == VerdictStatus::ok);
    CHECK(again.profile_skipped == o.profile_skipped);
    CHECK(again.profile_ms == 0);
    CHECK(slot->phases().profiles == 1);
  }
  SUBCASE("past its time limit: dropped, the verdict stands") {
    auto slot = profiling_slot(fake_ncu("slow", "sleep 30\ncat \"$here/report.csv\"\n"), 1000);
    ks::runner r(slot);
    const auto since = std::chrono::steady_clock::now();
    const auto o = r.run(t, fake_lib("ok"), 1);
    CHECK(std::chrono::steady_clock::now() - since < std::chrono::seconds(20));
    CHECK_MESSAGE(o.status == VerdictStatus::ok, o.reason);
    CHECK_FALSE(o.profile.has_value());
    CHECK_MESSAGE(has(o.profile_skipped, "1000 ms limit"), o.profile_skipped);
  }
  SUBCASE("the kernel fails under ncu: no profile, the verdict stands") {
    auto slot = profiling_slot(fake_ncu("fail", "cat \"$here/report.csv\"\n"));
    ks::runner r(slot);
    const auto o = r.run(t, fake_lib("profilefail"), 1);
    CHECK_MESSAGE(o.status == VerdictStatus::ok, o.reason);
    CHECK_FALSE(o.profile.has_value());
    CHECK_MESSAGE(has(o.profile_skipped, "the profiled child failed at profile: CUDA error"), o.profile_skipped);
  }
  SUBCASE("an ncu that cannot run here: its error in the reason, the verdict stands") {
    const auto dir = fs::temp_directory_path() / "kforge-fake-ncu-broken";
    fs::create_directories(dir);
    std::ofstream(dir / "ncu") << "#!/usr/bin/env bash\necho '==ERROR== Failed to launch the target'\nexit 1\n";
    ::chmod((dir / "ncu").c_str(), 0755);
    auto slot = profiling_slot((dir / "ncu").string());
    ks::runner r(slot);
    const auto o = r.run(t, fake_lib("ok"), 1);
    CHECK_MESSAGE(o.status == VerdictStatus::ok, o.reason);
    CHECK_FALSE(o.profile.has_value());
    CHECK_MESSAGE(has(o.profile_skipped, "the profiled child failed at hello"), o.profile_skipped);
    CHECK_MESSAGE(has(o.profile_skipped, "==ERROR== Failed to launch the target"), o.profile_skipped);
  }
  SUBCASE("no ncu: the reason, nothing started") {
    auto slot = profiling_slot("");
    ks::runner r(slot);
    const auto o = r.run(t, fake_lib("ok"), 1);
    CHECK(o.status == VerdictStatus::ok);
    CHECK(o.profile_skipped == "ncu not found (looked at nowhere)");
    CHECK(slot->phases().profiles == 0);
  }
}

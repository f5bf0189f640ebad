#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "common/subprocess.hpp"
#include "sandbox/evaluator.hpp"
#include "sandbox/toolchain.hpp"

using namespace kforge::sandbox;
namespace fs = std::filesystem;

TEST_CASE("the known-good candidate compiles with the sandbox's fixed flags") {
  auto tc = find_toolchain();
  if (!tc) {
    // CI and build machines have nvcc in /usr/local/cuda; a host without it must say so loudly.
    FAIL("no CUDA toolchain: " << tc.message());
  }
  CHECK(fs::exists(fs::path(tc->abi_include) / "kforge" / "kernel_abi.h"));
  CHECK(tc->release != "unknown");
  const auto dir = fs::temp_directory_path() / ("kforge-toolchain-" + std::to_string(::getpid()));
  auto probe = compile_known_good(*tc, dir.string(), "sm_90a");
  REQUIRE(probe.ok());
  INFO(probe->log);
  CHECK(probe->ok);
  CHECK(fs::exists(dir / "probe.so"));
  // The library exports the ABI entry point with C linkage.
  const std::vector<std::string> nm_cmd{"nm", "-D", "--defined-only", (dir / "probe.so").string()};
  auto nm = kforge::run_process(nm_cmd, std::chrono::seconds(30));
  REQUIRE(nm.ok());
  CHECK(nm->output.find(" T kf_forward") != std::string::npos);
  // Machine code for the asked arch only: no PTX embedded (it would cost a second cicc pass).
  const fs::path cuobjdump = fs::path(tc->nvcc).parent_path() / "cuobjdump";
  if (fs::exists(cuobjdump)) {
    auto elf = kforge::run_process({cuobjdump.string(), "--list-elf", (dir / "probe.so").string()},
                                   std::chrono::seconds(30));
    auto ptx = kforge::run_process({cuobjdump.string(), "--list-ptx", (dir / "probe.so").string()},
                                   std::chrono::seconds(30));
    REQUIRE(elf.ok());
    REQUIRE(ptx.ok());
    CHECK(elf->output.find("sm_90a") != std::string::npos);
    CHECK(ptx->output.find(".ptx") == std::string::npos);
  }
  fs::remove_all(dir);
}

TEST_CASE("the fixed flags ask for machine code of the target arch only") {
  const toolchain tc{"/usr/local/cuda/bin/nvcc", "13.0", "/abi"};
  const auto cmd = compile_command(tc, "k.cu", "k.so", "sm_90a");
  const auto at = std::find(cmd.begin(), cmd.end(), "-gencode");
  REQUIRE(at != cmd.end());
  REQUIRE(at + 1 != cmd.end());
  CHECK(*(at + 1) == "arch=compute_90a,code=sm_90a");
  CHECK(std::count_if(cmd.begin(), cmd.end(), [](const std::string& a) { return a.rfind("-arch", 0) == 0; }) == 0);
  CHECK(std::find(cmd.begin(), cmd.end(), "-O3") != cmd.end());
  CHECK(valid_arch("sm_90a"));
  CHECK(valid_arch("sm_80"));
  CHECK(valid_arch("compute_90"));
  CHECK_FALSE(valid_arch("native"));
  CHECK_FALSE(valid_arch("all-major"));
  CHECK_FALSE(valid_arch("sm_90a -G"));
}

TEST_CASE("an evaluator for an arch that is not one target is an error that names it") {
  evaluator_options o;
  o.compile.arch = "native";
  auto ev = evaluator::create(o);
  REQUIRE_FALSE(ev.ok());
  CHECK(ev.message().find("'native'") != std::string::npos);
}

TEST_CASE("a candidate that does not compile fails with nvcc's message") {
  auto tc = find_toolchain();
  REQUIRE(tc.ok());
  const auto dir = fs::temp_directory_path() / ("kforge-toolchain-bad-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "bad.cu") << "#include <kforge/kernel_abi.h>\nint kf_forward( {\n";
  auto out = kforge::run_process(
      compile_command(*tc, (dir / "bad.cu").string(), (dir / "bad.so").string(), "sm_90a"),
      std::chrono::seconds(60));
  REQUIRE(out.ok());
  CHECK(out->exit_code != 0);
  CHECK(out->output.find("bad.cu") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("run_process reports exit codes, output and time limits") {
  auto ok = kforge::run_process({"sh", "-c", "echo hi; exit 3"}, std::chrono::seconds(10));
  REQUIRE(ok.ok());
  CHECK(ok->exit_code == 3);
  CHECK(ok->output == "hi\n");
  auto slow = kforge::run_process({"sh", "-c", "sleep 30"}, std::chrono::milliseconds(200));
  REQUIRE(slow.ok());
  CHECK(slow->timed_out);
  CHECK(slow->seconds < 5);
  auto missing = kforge::run_process({"/nonexistent/kforge-tool"}, std::chrono::seconds(5));
  REQUIRE(missing.ok());
  CHECK(missing->exit_code == 127);
  CHECK(missing->output.find("cannot run") != std::string::npos);
}

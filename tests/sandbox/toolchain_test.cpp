#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "common/subprocess.hpp"
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
  fs::remove_all(dir);
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

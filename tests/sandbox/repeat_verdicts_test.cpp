// kforge eval --reuse-repeats: a task's identical sources are judged once (compile-only here, so
// it runs without a GPU). The reuse rules themselves: tests/pipeline/verdict_reuse_test.cpp.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "sandbox/eval_command.hpp"
#include "sandbox/toolchain.hpp"

namespace fs = std::filesystem;

TEST_CASE("kforge eval --reuse-repeats judges a task's repeated source once and says so") {
  const fs::path dir = fs::temp_directory_path() / ("kforge-repeats-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "c" / "l1" / "relu");
  const std::string good = kforge::sandbox::known_good_candidate();
  for (const char* name : {"s0.cu", "s1.cu"}) std::ofstream(dir / "c" / "l1" / "relu" / name) << good;
  std::ofstream(dir / "c" / "l1" / "relu" / "s2.cu") << good << "\n// another source\n";

  kforge::sandbox::eval_options o;
  o.candidates = (dir / "c").string();
  o.out = (dir / "verdicts.jsonl").string();
  o.summary = (dir / "summary.json").string();
  o.compile_only = true;
  o.jobs = 1;
  o.seed = 1;
  o.cache = (dir / "cache").string();
  o.reuse_repeats = true;
  std::ostringstream out, err;
  REQUIRE_MESSAGE(kforge::sandbox::eval_command(o, out, err) == 0, err.str());
  INFO(err.str());
  int reused = 0, judged = 0;
  std::ifstream in(o.out);
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    INFO(line);
    CHECK(j["status"] == "compiled");
    if (j.value("reused", false)) {
      ++reused;
      CHECK(j["file"].get<std::string>().find("s1.cu") != std::string::npos);
      CHECK(j["compile_ms"] == 0.0);
    } else {
      ++judged;
    }
  }
  CHECK(reused == 1);
  CHECK(judged == 2);
  std::ifstream s(o.summary);
  CHECK(nlohmann::json::parse(s)["reused"] == 1);
  CHECK(err.str().find("1 of the verdicts reused") != std::string::npos);
  fs::remove_all(dir);
}

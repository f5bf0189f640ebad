// The file of eager and torch.compile times (tasks/measured_baselines.hpp): the compile / eager
// ratio per task and device, only where both were measured at the primary shapes, and the file
// refused, naming the line, where it is ambiguous or malformed.

#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tasks/measured_baselines.hpp"

using namespace kforge::tasks;
namespace fs = std::filesystem;

namespace {

const std::string fixture = std::string(KFORGE_TEST_DATA) + "/data/compile_baselines.jsonl";

std::string refusal(const std::string& text) {
  const auto path = (fs::temp_directory_path() / ("kforge-baselines-" + std::to_string(::getpid()) + ".jsonl")).string();
  std::ofstream(path) << text;
  auto b = read_measured_baselines(path);
  fs::remove(path);
  REQUIRE_MESSAGE(!b.ok(), "accepted: " << text);
  CHECK(b.message().find(path + ":") == 0);  // the file (and line) come first
  return b.message();
}

const std::string h100 = "NVIDIA H100 80GB HBM3";
const std::string line = R"({"id": "a", "device": "X", "mode": "default", "eager_ms": 2, "compile_ms": 1, "ok": true})";

}  // namespace

TEST_CASE("a baselines file gives compile / eager per task for one device") {
  auto b = read_measured_baselines(fixture);
  REQUIRE_MESSAGE(b.ok(), (b.ok() ? "" : b.message()));
  CHECK(b->lines.size() == 5);
  CHECK(b->devices() == std::vector<std::string>{h100, "NVIDIA H200"});
  const auto r = b->compile_ratios(h100);
  // The failed line (no compile time) gives no ratio; the others compile_ms / eager_ms.
  REQUIRE(r.size() == 2);
  CHECK(r.at("kb/l1/19_ReLU") == doctest::Approx(0.5));
  CHECK(r.at("kb/l2/12_Gemm") == doctest::Approx(1.25));
  CHECK(b->mode_of(h100) == "default");
  CHECK(b->torch_of(h100) == "2.11.0");
  // The other device's ratio is its own; a line at the smallest shapes times nothing the sandbox times.
  const auto h200 = b->compile_ratios("NVIDIA H200");
  CHECK(h200.size() == 1);
  CHECK(h200.at("kb/l1/19_ReLU") == doctest::Approx(1.0 / 3));
  CHECK(b->mode_of("NVIDIA H200") == "max-autotune");
  CHECK(b->compile_ratios("NVIDIA A100").empty());
}

TEST_CASE("an ambiguous or malformed baselines file is refused with the line") {
  CHECK(refusal("{not json\n").find(":1: not a JSON object") != std::string::npos);
  CHECK(refusal(R"({"device": "X", "ok": true, "eager_ms": 1})" "\n").find(":1: expected id") != std::string::npos);
  CHECK(refusal(R"({"id": "a", "device": "X", "ok": true})" "\n").find("positive eager_ms") != std::string::npos);
  CHECK(refusal(R"({"id": "a", "device": "X", "ok": false})" "\n").find("no error says why") != std::string::npos);
  // A task twice on one device: which time counts would be a guess.
  const auto twice = refusal(line + "\n\n" + line + "\n");
  CHECK(twice.find(":3: a on X again (first on line 1)") != std::string::npos);
  // Two modes for one device: one file is one run.
  std::string other = line;
  other.replace(other.find("\"a\""), 3, "\"b\"");
  other.replace(other.find("default"), 7, "max-autotune");
  CHECK(refusal(line + "\n" + other + "\n").find("one mode per file") != std::string::npos);
  CHECK(!read_measured_baselines("/nonexistent/baselines.jsonl").ok());
}

// sandbox/ncu_report.hpp on a real report: `ncu --csv --section SpeedOfLight --section Occupancy
// --section WarpStateStats --section LaunchStats` of a ReLU over 16 M floats on an H100
// (ncu 2025.3.1, 2026-12-06; fixtures/ncu_relu_h100.csv, the program's own output included).

#include <doctest/doctest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "sandbox/ncu_report.hpp"

using namespace kforge::sandbox;

namespace {

std::string fixture() {
  std::ifstream in(std::string(KFORGE_AGENT_FIXTURES) + "/ncu_relu_h100.csv");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("an ncu report: duration, occupancy, throughput and the stall its rule names") {
  auto p = slowest_kernel(fixture());
  REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.message()));
  CHECK(p->kernel == "relu(const float *, float *, long)");
  CHECK(p->duration_us == doctest::Approx(57.12));
  CHECK(p->achieved_occupancy_pct == doctest::Approx(71.92));
  CHECK(p->dram_throughput_pct == doctest::Approx(61.63));
  CHECK(p->sm_throughput_pct == doctest::Approx(26.31));
  REQUIRE(p->stalls.size() == 1);
  CHECK(p->stalls[0].first ==
        "waiting for a scoreboard dependency on a L1TEX (local, global, surface, texture) operation");
  CHECK(p->stalls[0].second == doctest::Approx(81.9));
}

TEST_CASE("the slowest of several launches; a report without a header or a duration is refused") {
  const std::string header =
      "\"ID\",\"Kernel Name\",\"Section Name\",\"Metric Name\",\"Metric Unit\",\"Metric Value\",\"Rule Name\",\"Rule Description\"\n";
  const std::string two = header +
                          "\"0\",\"fast\",\"SOL\",\"Duration\",\"us\",\"3.5\",\"\",\"\"\n"
                          "\"1\",\"slow, \"\"tiled\"\"\",\"SOL\",\"Duration\",\"ms\",\"1,250.5\",\"\",\"\"\n";
  auto all = parse_ncu_csv(two);
  REQUIRE(all.ok());
  REQUIRE(all->size() == 2);
  auto slow = slowest_kernel(two);
  REQUIRE(slow.ok());
  CHECK(slow->kernel == "slow, \"tiled\"");
  CHECK(slow->duration_us == doctest::Approx(1'250'500));
  CHECK_FALSE(parse_ncu_csv("==PROF== Connected\nno report\n").ok());
  const auto untimed = parse_ncu_csv(header + "\"0\",\"k\",\"Occupancy\",\"Achieved Occupancy\",\"%\",\"50\",\"\",\"\"\n");
  REQUIRE_FALSE(untimed.ok());
  CHECK(untimed.message().find("launch 0 (k) has no Duration") != std::string::npos);
}

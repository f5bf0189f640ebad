// `kforge eval --baselines`: speedups against torch.compile beside those against eager, from a
// fixture baselines file. Only the file's compile / eager ratio of the sandbox's device counts;
// tasks without one are counted and named, and both columns count the same tasks.

#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sandbox/eval_against_compile.hpp"

using json = nlohmann::json;
using namespace kforge;

namespace {

const std::string fixture = std::string(KFORGE_TEST_DATA) + "/../tasks/data/compile_baselines.jsonl";
const std::string h100 = "NVIDIA H100 80GB HBM3";

json ok(const std::string& task, double speedup) {
  return json{{"task", task}, {"status", "ok"}, {"speedup", speedup}};
}

std::vector<json> verdicts() {
  return {ok("kb/l1/19_ReLU", 3.0),     // compile is 2x eager here: 1.5x over compile
          ok("kb/l1/19_ReLU", 1.5),     // 0.75x over compile
          ok("kb/l2/12_Gemm", 0.9),     // compile is 1.25x slower than eager: 1.125x over compile
          json{{"task", "kb/l2/12_Gemm"}, {"status", "wrong_answer"}},
          ok("kb/l1/23_Softmax", 4.0),  // its compile failed: no compile time
          ok("l1/relu", 2.0)};          // not in the file
}

}  // namespace

TEST_CASE("eval rescales speedups to torch.compile by the baselines file's ratio on the sandbox's device") {
  auto b = tasks::read_measured_baselines(fixture);
  REQUIRE_MESSAGE(b.ok(), (b.ok() ? "" : b.message()));
  auto vs = verdicts();
  const auto ratios = b->compile_ratios(h100);
  for (auto& v : vs) sandbox::add_speedup_vs_compile(v, ratios);
  CHECK(vs[0].at("speedup_vs_compile").get<double>() == doctest::Approx(1.5));
  CHECK(vs[1].at("speedup_vs_compile").get<double>() == doctest::Approx(0.75));
  CHECK(vs[2].at("speedup_vs_compile").get<double>() == doctest::Approx(1.125));
  CHECK(!vs[3].contains("speedup_vs_compile"));
  CHECK(!vs[4].contains("speedup_vs_compile"));
  CHECK(!vs[5].contains("speedup_vs_compile"));

  const json block = sandbox::against_compile(vs, *b, h100);
  CHECK(block.at("device") == h100);
  CHECK(block.at("mode") == "default");
  CHECK(block.at("torch") == "2.11.0");
  CHECK(block.at("tasks_with_compile_time") == 2);
  CHECK(block.at("tasks_without_compile_time") == 2);
  CHECK(block.at("without") == json::array({"kb/l1/23_Softmax", "l1/relu"}));
  // Both columns over the same two tasks (four verdicts). Against eager both tasks are fast_1 at
  // best; against compile too (1.5x, 1.125x), but fast_1.5 only against eager.
  const auto& eager = block.at("vs_eager");
  const auto& compile = block.at("vs_compile");
  CHECK(eager.at("candidates") == 4);
  CHECK(compile.at("candidates") == 4);
  CHECK(eager.at("per_task").at("fast_p_best_of_samples").at("fast_1.5").get<double>() == doctest::Approx(0.5));
  CHECK(compile.at("per_task").at("fast_p_best_of_samples").at("fast_1.5").get<double>() == doctest::Approx(0.0));
  CHECK(compile.at("per_task").at("fast_p_best_of_samples").at("fast_1").get<double>() == doctest::Approx(1.0));
  // fast_1 mean over samples: ReLU 1 of 2, Gemm 1 of 2 against compile.
  CHECK(compile.at("per_task").at("fast_p_mean_over_samples").at("fast_1").get<double>() == doctest::Approx(0.5));
  CHECK(compile.at("geomean_speedup").get<double>() ==
        doctest::Approx(std::cbrt(1.5 * 0.75 * 1.125)));
  const auto text = sandbox::format_against_compile(block);
  INFO(text);
  CHECK(text.find("2 task(s) have a compile time measured on " + h100) != std::string::npos);
  CHECK(text.find("2 lack one") != std::string::npos);
  CHECK(text.find("vs compile") != std::string::npos);
}

TEST_CASE("eval's compile columns are empty, saying why, on a device the file was not measured on") {
  auto b = tasks::read_measured_baselines(fixture);
  REQUIRE(b.ok());
  const json block = sandbox::against_compile(verdicts(), *b, "NVIDIA A100-SXM4-80GB");
  CHECK(block.at("tasks_with_compile_time") == 0);
  CHECK(block.at("tasks_without_compile_time") == 4);
  const auto text = sandbox::format_against_compile(block);
  CHECK(text.find("the file holds devices: \"" + h100 + "\" \"NVIDIA H200\"") != std::string::npos);
  // No GPU ran (compile-only): nothing to rescale.
  CHECK(sandbox::format_against_compile(sandbox::against_compile(verdicts(), *b, "")).find("no GPU ran") !=
        std::string::npos);
}

// Speed drills (corpus/speed_drill.hpp): per task, its slowest timed variant, the observation of
// that variant's real verdict, then its fastest; and verdict lines read back as verdicts.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "corpus/corpus_command.hpp"
#include "corpus/speed_drill.hpp"
#include "sandbox/verdict_json.hpp"

using namespace kforge;
using json = nlohmann::json;

namespace {

corpus::timed_variant timed(const tasks::task& t, const std::string& name, double candidate_ms, double baseline_ms) {
  corpus::kernel_variant v{name, "The " + name + " kernel.", "// " + name + "\n"};
  json verdict = {{"status", "ok"},          {"reason", ""},
                  {"candidate_ms", candidate_ms}, {"candidate_iqr_ms", 0.001},
                  {"baseline_ms", baseline_ms},  {"baseline_iqr_ms", 0.002},
                  {"speedup", baseline_ms / candidate_ms}, {"trials", 30},
                  {"resources", json::array({{{"kernel", "k"}, {"registers", 32}, {"shared_bytes", 0}}})}};
  return {&t, "prompt of " + t.id, v, verdict};
}

}  // namespace

TEST_CASE("speed drills: the slowest variant and its observation, then the fastest, where they differ enough") {
  tasks::task a, b;
  a.id = "l1/a";
  b.id = "l1/b";
  gpu_facts gpu;
  gpu.registers_per_sm = 65536;
  // a: 0.4 ms, 0.25 ms, 0.2 ms against a 0.2 ms baseline; b: 0.21 and 0.2 ms (under 1.25x apart).
  const std::vector<corpus::timed_variant> vs = {timed(a, "naive", 0.4, 0.2), timed(a, "grid", 0.25, 0.2),
                                                 timed(b, "naive", 0.21, 0.2), timed(a, "vec4", 0.2, 0.2),
                                                 timed(b, "vec4", 0.2, 0.2)};
  auto drills = corpus::speed_drills(vs, corpus::speed_drill_gain, gpu);
  REQUIRE(drills.ok());
  REQUIRE(drills->size() == 1);
  const auto& d = drills->front();
  CHECK(d.task_id == "l1/a");
  CHECK(d.slow_variant == "naive");
  CHECK(d.fast_variant == "vec4");
  CHECK(d.slow_speedup == doctest::Approx(0.5));
  CHECK(d.prompt == "prompt of l1/a");
  CHECK(d.slow_completion.find("The naive kernel.") == 0);
  CHECK(d.fast_completion.find("// vec4") != std::string::npos);
  INFO(d.observation);
  CHECK(d.observation.find("## Turn 1: correct") == 0);
  CHECK(d.observation.find("Your kernel is correct: 0.4 ms against the baseline's 0.2 ms, 0.50x the baseline") !=
        std::string::npos);
  CHECK(d.observation.find("its registers leave room for 2048 resident threads per SM") != std::string::npos);
  CHECK(d.observation.find("Make it faster") != std::string::npos);
  // A verdict line that does not read back is an error naming the task.
  auto bad = vs;
  bad[0].verdict["status"] = "fine";
  bad[0].verdict["speedup"] = 0.5;
  const auto refused = corpus::speed_drills(bad, corpus::speed_drill_gain, gpu);
  CHECK(refused.ok());  // a status other than ok is not a timed variant: left out, not read
  bad[0].verdict["status"] = "ok";
  bad[0].verdict["candidate_ms"] = "slow";
  const auto wrong_type = corpus::speed_drills(bad, corpus::speed_drill_gain, gpu);
  REQUIRE_FALSE(wrong_type.ok());
  CHECK(wrong_type.message().find("l1/a (naive)") != std::string::npos);
}

TEST_CASE("a verdict line reads back as the verdict it was written from") {
  const json line = {{"status", "wrong_answer"}, {"reason", "output 0 differs"}, {"max_abs_error", 1.5},
                     {"first_bad_index", 7}, {"checks", 2},
                     {"diagnostics", json::array({{{"line", 3}, {"severity", "warning"}, {"code", "177-D"}, {"message", "m"}}})}};
  auto v = sandbox::verdict_from_json(line);
  REQUIRE(v.ok());
  CHECK(v->status == wire::VerdictStatus::wrong_answer);
  CHECK(v->first_bad_index == 7);
  REQUIRE(v->diagnostics.size() == 1);
  CHECK(v->diagnostics[0]->severity == wire::Severity::warning);
  const auto again = sandbox::verdict_json(*v);
  for (const char* k : {"status", "reason", "max_abs_error", "first_bad_index", "checks", "diagnostics"})
    CHECK_MESSAGE(again.at(k) == line.at(k), k);
  CHECK_FALSE(sandbox::verdict_from_json(json{{"status", "fine"}}).ok());
  CHECK_FALSE(sandbox::verdict_from_json(json::object()).ok());
}

TEST_CASE("corpus build --speed-drills needs --verdicts") {
  corpus::corpus_options o;
  o.out = "/tmp/kforge-speed-drills-refused";
  o.speed_drills = true;
  std::ostringstream out, err;
  CHECK(corpus::corpus_command(o, out, err) == 2);
  CHECK(err.str().find("--speed-drills needs --verdicts") != std::string::npos);
}

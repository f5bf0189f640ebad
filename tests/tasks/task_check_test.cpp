// The degenerate-task checks: each crafted task must be rejected for its own reason, and an honest
// task must pass.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "tasks/task_check.hpp"
#include "tasks/task_parser.hpp"
#include "task_builders.hpp"

using namespace kforge::tasks;
using json = nlohmann::json;

namespace {

json base(const std::string& source) {
  return testing::two_input_task("t/check", "degenerate-task check", source, {8, 16}, {3, 5});
}

check_report check(const json& j) {
  const auto t = testing::parse_or_fail(j);
  check_options o;
  o.shapes = smallest_shapes(t);
  return check_task_runs(t, o);
}

// Whether some problem of the report contains `part`.
bool flags(const check_report& r, const std::string& part) {
  for (const auto& p : r.problems)
    if (p.find(part) != std::string::npos) return true;
  std::string all;
  for (const auto& p : r.problems) all += p + "\n";
  INFO("problems: " << all);
  return false;
}

}  // namespace

TEST_CASE("an honest task passes and reports its outputs") {
  auto r = check(base("def forward(x, y):\n    return torch.relu(x) + y\n"));
  CHECK_MESSAGE(r.ok(), (r.ok() ? "" : r.problems.front()));
  REQUIRE(r.outputs.size() == 1);
  CHECK(r.outputs[0].dims == shape{3, 5});
  CHECK(r.elapsed_ms > 0);
}

TEST_CASE("rejected: an input the outputs ignore") {
  auto r = check(base("def forward(x, y):\n    return torch.relu(x)\n"));
  CHECK(flags(r, "no output changes beyond the tolerance when input 'y' is redrawn"));
}

TEST_CASE("rejected: an input whose effect hides under the tolerance") {
  auto r = check(base("def forward(x, y):\n    return x + 1e-6 * y\n"));
  CHECK(flags(r, "input 'y' is redrawn"));
}

TEST_CASE("rejected: a constant output") {
  auto r = check(base("def forward(x, y):\n    return torch.zeros_like(x) + 3.0\n"));
  CHECK(flags(r, "output 'z' is constant"));
  CHECK(flags(r, "output 'z' does not change when any input changes"));
}

TEST_CASE("rejected: an output within atol of zero everywhere") {
  auto r = check(base("def forward(x, y):\n    return (x + y) * 1e-7\n"));
  CHECK(flags(r, "within atol of zero everywhere"));
}

TEST_CASE("rejected: NaN or Inf in an output") {
  auto r = check(base("def forward(x, y):\n    return torch.log(x) + y\n"));
  CHECK(flags(r, "output 'z' has NaN or Inf"));
}

TEST_CASE("rejected: a reference that is not deterministic") {
  auto r = check(base("def forward(x, y):\n    return x + y + torch.rand_like(x)\n"));
  CHECK(flags(r, "two runs on the same inputs differ"));
}

TEST_CASE("rejected: a reference that modifies its input") {
  auto r = check(base("def forward(x, y):\n    x.add_(1.0)\n    return x + y\n"));
  CHECK(flags(r, "the reference modifies its input 'x'"));
}

TEST_CASE("rejected: every input constant") {
  auto j = base("def forward(x, y):\n    return x + y\n");
  for (auto& in : j["inputs"]) in["init"] = {{"dist", "constant"}, {"value", 1.5}};
  auto r = check(j);
  CHECK(flags(r, "every input is a constant"));
}

TEST_CASE("rejected: a reference that does not compile or fails to run") {
  auto r = check(base("def forward(x, y):\n    return torch.not_an_op(x)\n"));
  CHECK(flags(r, "does not compile"));
  r = check(base("def forward(x, y):\n    return torch.mm(x, y)\n"));
  CHECK(flags(r, "failed on cpu"));
}

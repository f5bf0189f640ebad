// Inputs derived from drawn tensors (a task's `draws` and `prepare`): such a task parses and
// validates; its inputs are prepare applied to the draws, drawn as inputs are drawn; the task as
// the supervisor sends it (JSON) and as it travels in messages (wire) gives the reference server
// and the candidate child, which both call make_inputs, the same bytes; and a prepare that does
// not compile or returns the wrong count, shape or dtype is refused saying so. And outputs larger
// than one comparison slice compare slice by slice.
#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <limits>
#include <string>

#include "tasks/inputs.hpp"
#include "tasks/task_check.hpp"
#include "tasks/task_parser.hpp"
#include "tasks/task_wire.hpp"
#include "tests/doctest_torch.hpp"  // last: after every header that may include LibTorch

using namespace kforge::tasks;
using json = nlohmann::json;

namespace {

// KernelBench's symmetric-matmul and masked-cumsum inputs in one task: A = (d0 + d0^T) / 2, B the
// upper triangle of d1, a mask from a randint draw, and `s * d3` with a drawn 0-d scale s.
json derived_task() {
  return json::parse(R"({
    "id": "t/derived", "category": "other", "description": "derived inputs",
    "draws": [{"name": "d0", "shape": [16, 16], "dtype": "float32",
               "init": {"dist": "uniform", "low": 0, "high": 1}},
              {"name": "d1", "shape": [16, 16], "dtype": "float32",
               "init": {"dist": "normal", "mean": 0, "std": 1}},
              {"name": "d2", "shape": [16, 16], "dtype": "int64",
               "init": {"dist": "randint", "low": 0, "high": 2}},
              {"name": "s", "shape": [], "dtype": "float32",
               "init": {"dist": "uniform", "low": 0, "high": 1}},
              {"name": "d3", "shape": [16, 16], "dtype": "float32",
               "init": {"dist": "uniform", "low": 0, "high": 1}}],
    "prepare": "def prepare(d0: Tensor, d1: Tensor, d2: Tensor, s: Tensor, d3: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor]:\n  return (torch.div(torch.add(d0, torch.numpy_T(d0)), 2), torch.triu(d1), torch.to(d2, 11), torch.mul(d3, s))\n",
    "inputs": [{"name": "A", "shape": [16, 16], "dtype": "float32"},
               {"name": "B", "shape": [16, 16], "dtype": "float32"},
               {"name": "mask", "shape": [16, 16], "dtype": "bool"},
               {"name": "x", "shape": [16, 16], "dtype": "float32"}],
    "outputs": [{"name": "out", "shape": [16, 16], "dtype": "float32"}],
    "reference": "def forward(A, B, mask, x):\n    return torch.matmul(A, B) + torch.cumsum(x * mask, 1)\n"})");
}

task parse_ok(const json& j) {
  auto t = parse_task(j.dump(), "test");
  REQUIRE_MESSAGE(t.ok(), (t.ok() ? "" : t.message()));
  return *t;
}

// The draws alone: a task with the same id whose inputs are the draws, drawn as make_inputs draws
// any input (each from its own generator, seeded by task id, seed and name).
tensor_list draws_of(const task& t, std::uint64_t seed) {
  task plain = t;
  plain.inputs = t.draws;
  plain.draws.clear();
  plain.prepare.clear();
  auto d = make_inputs(plain, seed, std::nullopt, device::cpu());
  REQUIRE_MESSAGE(d.ok(), (d.ok() ? "" : d.message()));
  return *d;
}

bool identical(const tensor_list& a, const tensor_list& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a.tensors()[i].scalar_type() != b.tensors()[i].scalar_type() ||
        a.tensors()[i].sizes() != b.tensors()[i].sizes() ||
        !at::equal(a.tensors()[i], b.tensors()[i]))
      return false;
  return true;
}

std::string inputs_error(json j) {
  auto t = parse_task(j.dump(), "test");
  REQUIRE_MESSAGE(t.ok(), (t.ok() ? "" : t.message()));
  auto in = make_inputs(*t, 1, std::nullopt, device::cpu());
  REQUIRE_FALSE(in.ok());
  return in.message();
}

}  // namespace

TEST_CASE("a task with draws and prepare parses, round-trips and validates") {
  const auto t = parse_ok(derived_task());
  CHECK(t.draws.size() == 5);
  CHECK(t.prepare.find("def prepare(") != std::string::npos);
  // What the supervisor sends (JSON) and what messages carry (wire) are the same task.
  const auto again = parse_ok(json::parse(to_json_line(t)));
  CHECK(again.draws.size() == 5);
  CHECK(again.prepare == t.prepare);
  CHECK_FALSE(json::parse(to_json_line(t))["inputs"][0].contains("init"));
  auto w = from_wire(to_wire(t));
  REQUIRE_MESSAGE(w.ok(), (w.ok() ? "" : w.message()));
  CHECK(w->draws.size() == 5);
  CHECK(w->draws[2].init.dist == distribution::randint);
  CHECK(w->prepare == t.prepare);

  const auto report = check_task_runs(t);
  INFO((report.problems.empty() ? std::string() : report.problems.front()));
  CHECK(report.ok());
}

TEST_CASE("derived inputs are prepare applied to the draws, the same in every process") {
  const auto t = parse_ok(derived_task());
  auto in = make_inputs(t, 7, std::nullopt, device::cpu());
  REQUIRE_MESSAGE(in.ok(), (in.ok() ? "" : in.message()));
  REQUIRE(in->size() == 4);
  const auto& A = in->tensors()[0];
  CHECK(at::equal(A, A.t()));  // symmetric, as KernelBench's get_inputs makes it
  CHECK(in->type_name(2) == "Bool");

  // prepare by hand on the draws gives the same bytes.
  const auto d = draws_of(t, 7);
  const auto& x = d.tensors();
  tensor_list expected;
  expected.tensors() = {(x[0] + x[0].t()) / 2, x[1].triu(), x[2].to(at::kBool), x[4] * x[3]};
  CHECK(identical(*in, expected));

  // The reference server and the candidate child call make_inputs on the task each received:
  // one parsed from the JSON the supervisor sends, the other from the wire form.
  const auto child = parse_ok(json::parse(to_json_line(t)));
  auto server_inputs = make_inputs(*from_wire(to_wire(t)), 7, std::nullopt, device::cpu());
  auto child_inputs = make_inputs(child, 7, std::nullopt, device::cpu());
  REQUIRE(server_inputs.ok());
  REQUIRE(child_inputs.ok());
  CHECK(identical(*server_inputs, *child_inputs));
  CHECK(identical(*server_inputs, *in));

  // Another seed redraws every draw; make_input gives the input make_inputs gives.
  auto other = make_inputs(t, 8, std::nullopt, device::cpu());
  REQUIRE(other.ok());
  CHECK_FALSE(at::equal(other->tensors()[0], in->tensors()[0]));
  auto one = make_input(t, 3, 7, std::nullopt, device::cpu());
  REQUIRE(one.ok());
  CHECK(at::equal(one->tensors()[0], in->tensors()[3]));
}

TEST_CASE("a prepare that does not fit the inputs is refused saying how") {
  auto bad = [](const std::string& body) {
    auto j = derived_task();
    j["prepare"] = "def prepare(d0: Tensor, d1: Tensor, d2: Tensor, s: Tensor, d3: Tensor):\n" + body;
    return j;
  };
  const auto count = inputs_error(bad("  return (d0, d1, torch.to(d2, 11))\n"));
  CHECK(count.find("prepare: returned 3 tensors, the task declares 4 inputs") != std::string::npos);
  const auto shape = inputs_error(bad("  return (d0, d1[0], torch.to(d2, 11), d3)\n"));
  CHECK(shape.find("input 'B' has shape [16], the task declares [16, 16]") != std::string::npos);
  const auto type = inputs_error(bad("  return (d0, d1, d2, d3)\n"));
  CHECK(type.find("input 'mask' has dtype Long, the task declares bool") != std::string::npos);
  const auto syntax = inputs_error(bad("  return (d0 +, d1)\n"));
  CHECK(syntax.find("task 't/derived': prepare: does not compile") != std::string::npos);
  auto renamed = derived_task();
  renamed["prepare"] = "def prepare(a, d1, d2, s, d3):\n  return (a, d1, torch.to(d2, 11), d3)\n";
  CHECK(inputs_error(renamed).find("argument 0 is 'a', the task's draw 0 is 'd0'") !=
        std::string::npos);
  // validate reports the same problem.
  auto t = parse_task(bad("  return (d0, d1, d2, d3)\n").dump(), "test");
  REQUIRE(t.ok());
  const auto report = check_task_runs(*t);
  REQUIRE_FALSE(report.ok());
  CHECK(report.problems.front().find("input 'mask' has dtype Long") != std::string::npos);
}

TEST_CASE("draws and prepare come together, without inits on the inputs and without variants") {
  auto error_of = [](const json& j) {
    auto t = parse_task(j.dump(), "f.jsonl:1");
    REQUIRE_FALSE(t.ok());
    return t.message();
  };
  auto j = derived_task();
  j["inputs"][0]["init"] = {{"dist", "uniform"}, {"low", 0}, {"high", 1}};
  CHECK(error_of(j) ==
        "f.jsonl:1: inputs[0].init: not allowed: prepare computes this input from the draws");
  j = derived_task();
  j.erase("prepare");
  CHECK(error_of(j).find("inputs[0].init: required field is missing") != std::string::npos);
  j = derived_task();
  j["draws"] = json::array();
  CHECK(error_of(j) == "f.jsonl:1: draws: prepare needs at least one draw");
  j = derived_task();
  j["prepare"] = "def forward(d0):\n  return d0\n";
  CHECK(error_of(j) == "f.jsonl:1: prepare: must define `def prepare(...)`");
  j = derived_task();
  j["variants"] = json::array({{{"A", {8, 8}}}});
  CHECK(error_of(j).find("variants: a task with prepare has no shape variants") !=
        std::string::npos);
  j = derived_task();
  j["draws"][1]["name"] = "d0";
  CHECK(error_of(j) == "f.jsonl:1: draws[1].name: duplicate name 'd0'");
  j = derived_task();
  j["draws"][2]["init"] = {{"dist", "normal"}, {"mean", 0}, {"std", 1}};
  CHECK(error_of(j).find("draws[2].init.dist: normal needs a floating dtype") != std::string::npos);
}

TEST_CASE("compare: an output larger than one comparison slice is compared slice by slice") {
  // 2^26 elements make a slice (tasks/inputs.cpp); these outputs take two, the second partial.
  const std::int64_t slice = std::int64_t{1} << 26, n = slice + 1000;
  tensor_list want, got;
  want.tensors().push_back(at::ones({n}, at::kFloat));
  got.tensors().push_back(at::ones({n}, at::kFloat));
  auto same = compare(want, got, tolerance{1e-5, 1e-5});
  REQUIRE(same.ok());
  CHECK(same->close);

  auto& g = got.tensors()[0];
  g[slice + 5] = 3.0f;  // in the second slice only
  auto late = compare(want, got, tolerance{1e-5, 1e-5});
  REQUIRE(late.ok());
  CHECK_FALSE(late->close);
  CHECK(late->bad_count == 1);
  CHECK(late->first_bad == slice + 5);
  CHECK(late->max_abs_error == doctest::Approx(2.0));

  g[7] = 1.5f;  // the first slice now has the first bad element, the second the largest error
  g[slice + 900] = std::numeric_limits<float>::quiet_NaN();
  auto both = compare(want, got, tolerance{1e-5, 1e-5});
  REQUIRE(both.ok());
  CHECK(both->bad_count == 3);
  CHECK(both->first_bad == 7);
  CHECK(both->max_abs_error == std::numeric_limits<double>::infinity());  // NaN counts as infinitely wrong
  CHECK(both->max_rel_error == std::numeric_limits<double>::infinity());
}

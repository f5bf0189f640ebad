// The reference runner: compile errors, signature checks, output checks against the task, and the
// shapes of outputs found on meta tensors.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "tasks/inputs.hpp"
#include "tasks/reference.hpp"
#include "tasks/task_parser.hpp"
#include "task_builders.hpp"

using namespace kforge::tasks;
using json = nlohmann::json;

namespace {

// A task with inputs x[4, 6] and y[4, 6] (float32), one output z[4, 6], a variant x,y [2, 3].
json base(const std::string& source) {
  return testing::two_input_task("t/ref", "reference runner test", source, {4, 6}, {2, 3});
}

task make(const json& j) { return testing::parse_or_fail(j); }

std::string run_error(const task& t, shape_choice which = std::nullopt) {
  auto ref = reference::compile(t);
  REQUIRE_MESSAGE(ref.ok(), (ref.ok() ? "" : ref.message()));
  auto in = make_inputs(t, 1, which, device::cpu());
  REQUIRE(in.ok());
  auto out = ref->run(*in);
  REQUIRE_FALSE(out.ok());
  return out.message();
}

bool has(const std::string& msg, const std::string& part) {
  INFO(msg);
  return msg.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("a reference compiles and runs; its outputs match the task") {
  const auto t = make(base("def forward(x, y):\n    return torch.relu(x) * y\n"));
  auto ref = reference::compile(t);
  REQUIRE(ref.ok());
  auto in = make_inputs(t, 1, std::nullopt, device::cpu());
  REQUIRE(in.ok());
  auto out = ref->run(*in);
  REQUIRE_MESSAGE(out.ok(), (out.ok() ? "" : out.message()));
  REQUIRE(out->size() == 1);
  CHECK(out->shape_of(0) == shape{4, 6});
  CHECK(out->type_of(0).value() == dtype::float32);
  // A variant: output shapes are the reference's own.
  auto vin = make_inputs(t, 1, 0, device::cpu());
  REQUIRE(vin.ok());
  auto vout = ref->run(*vin);
  REQUIRE(vout.ok());
  CHECK(vout->shape_of(0) == shape{2, 3});
}

TEST_CASE("a reference that does not compile: TorchScript's message with the task id") {
  const auto t = make(base("def forward(x, y):\n    return torch.nn.functional.relu(x)\n"));
  auto ref = reference::compile(t);
  REQUIRE_FALSE(ref.ok());
  CHECK(has(ref.message(), "task 't/ref': reference: does not compile: "));
  CHECK(has(ref.message(), "nn.functional"));
}

TEST_CASE("forward's signature must match the inputs: count, names, order, Tensor type") {
  auto r = reference::compile(make(base("def forward(x):\n    return x\n")));
  REQUIRE_FALSE(r.ok());
  CHECK(has(r.message(), "forward takes 1 arguments, the task has 2 inputs"));
  r = reference::compile(make(base("def forward(y, x):\n    return x + y\n")));
  REQUIRE_FALSE(r.ok());
  CHECK(has(r.message(), "forward's argument 0 is 'y', the task's input 0 is 'x'"));
  r = reference::compile(make(base("def forward(x, y: int):\n    return x * y\n")));
  REQUIRE_FALSE(r.ok());
  CHECK(has(r.message(), "argument 'y' is int, every argument must be a Tensor"));
  r = reference::compile(make(base("def helper(x):\n    return x\n"
                                   "def forward(x, y):\n    return helper(x) + y\n")));
  CHECK(r.ok());
}

TEST_CASE("outputs must agree with the task: count, dtype, shape at the primary shapes") {
  CHECK(has(run_error(make(base("def forward(x, y):\n    return x, y\n"))),
            "returned 2 tensors, the task declares 1 outputs"));
  CHECK(has(run_error(make(base("def forward(x, y):\n    return (x > y)\n"))),
            "output 'z' has dtype Bool, the task declares float32"));
  CHECK(has(run_error(make(base("def forward(x, y):\n    return x.double()\n"))),
            "output 'z' has dtype Double, the task declares float32"));
  CHECK(has(run_error(make(base("def forward(x, y):\n    return torch.sum(x, 0) + y[0]\n"))),
            "output 'z' has shape [6] at the primary input shapes, the task declares [4, 6]"));
  CHECK(has(run_error(make(base("def forward(x, y):\n    return x.size(0)\n"))),
            "returned Int, expected a Tensor or a tuple of Tensors"));
  CHECK(has(run_error(make(base("def forward(x, y):\n    return torch.mm(x, y)\n"))),
            "failed on cpu: "));
}

TEST_CASE("tuple outputs; outputs never alias inputs and are contiguous") {
  auto j = base("def forward(x, y):\n    return x, y.t()\n");
  j["outputs"].push_back({{"name", "w"}, {"shape", {6, 4}}, {"dtype", "float32"}});
  const auto t = make(j);
  auto ref = reference::compile(t);
  REQUIRE(ref.ok());
  auto in = make_inputs(t, 1, std::nullopt, device::cpu());
  REQUIRE(in.ok());
  auto out = ref->run(*in);
  REQUIRE_MESSAGE(out.ok(), (out.ok() ? "" : out.message()));
  REQUIRE(out->size() == 2);
  CHECK(out->shape_of(1) == shape{6, 4});
  // Same values as the input, but a copy: poisoning an output cannot touch an input.
  auto c = compare(in->pick(0), out->pick(0), tolerance{0, 0});
  REQUIRE(c.ok());
  CHECK(c->close);
  auto si = summarize(in->pick(0));
  auto so = summarize(out->pick(0));
  REQUIRE(si.ok());
  REQUIRE(so.ok());
  CHECK((*si)[0].content_hash == (*so)[0].content_hash);
}

TEST_CASE("output shapes at the primary shapes come from meta tensors without computing") {
  auto j = base("def forward(x, y):\n    return torch.matmul(x, y.t()), torch.softmax(x, -1)\n");
  j["outputs"] = {{{"name", "z"}, {"shape", {4, 4}}, {"dtype", "float32"}},
                  {{"name", "s"}, {"shape", {4, 6}}, {"dtype", "float32"}}};
  const auto t = make(j);
  auto ref = reference::compile(t);
  REQUIRE(ref.ok());
  auto shapes = ref->output_shapes({{1 << 20, 4096}, {1 << 20, 4096}});
  REQUIRE_MESSAGE(shapes.ok(), (shapes.ok() ? "" : shapes.message()));
  CHECK((*shapes)[0] == shape{1 << 20, 1 << 20});
  CHECK((*shapes)[1] == shape{1 << 20, 4096});
}

TEST_CASE("timing reports a median over the trials") {
  const auto t = make(base("def forward(x, y):\n    return x + y\n"));
  auto ref = reference::compile(t);
  REQUIRE(ref.ok());
  auto in = make_inputs(t, 1, std::nullopt, device::cpu());
  REQUIRE(in.ok());
  auto tm = ref->time(*in, 1, 5);
  REQUIRE(tm.ok());
  CHECK(tm->trials == 5);
  CHECK(tm->median_ms > 0);
  CHECK(tm->p25_ms <= tm->median_ms);
  CHECK(tm->median_ms <= tm->p75_ms);
}

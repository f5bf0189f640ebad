// The shapes a candidate's kf_forward was called with, as a runtime failure's reason gives them
// (sandbox/call_shapes.hpp).
#include <doctest/doctest.h>

#include "sandbox/call_shapes.hpp"

namespace ks = kforge::sandbox;
namespace kt = kforge::tasks;

namespace {

kt::task gemm_task() {
  kt::task t;
  t.id = "t/gemm";
  t.inputs = {{"x", {64, 1000}, kt::dtype::float32, {}}, {"w", {1000, 512}, kt::dtype::float16, {}}};
  t.outputs = {{"y", {64, 512}, kt::dtype::float32}};
  return t;
}

}  // namespace

TEST_CASE("a call is described with the task's names and dtypes and this call's shapes") {
  // A variant's shapes, not the task's primary ones: those are what the kernel was given.
  CHECK(ks::describe_call(gemm_task(), {{37, 1000}, {1000, 512}}, {{37, 512}}) ==
        "called with x float32 [37, 1000], w float16 [1000, 512]; outputs y float32 [37, 512]");
  CHECK(ks::describe_call(gemm_task(), {{}, {3}}, {{}}) ==
        "called with x float32 [], w float16 [3]; outputs y float32 []");
}

TEST_CASE("tensors beyond the task's own are named by position, and a long list is cut") {
  CHECK(ks::describe_call(gemm_task(), {{1}, {2}, {3}}, {{4}, {5}}) ==
        "called with x float32 [1], w float16 [2], input 2 [3]; outputs y float32 [4], output 1 [5]");
  // Twelve tensors at most by default: the rest counted, inputs first.
  const std::vector<kt::shape> many(14, kt::shape{2});
  const auto text = ks::describe_call(gemm_task(), many, {{2}});
  CHECK(text.find("input 11 [2], and 2 more; outputs 1 more") != std::string::npos);
  CHECK(ks::describe_call(gemm_task(), {{1}, {2}}, {{3}}, 1) == "called with x float32 [1], and 1 more; outputs 1 more");
}

// Inputs from a seed: the same seed gives the same bytes on every call, another seed other bytes;
// each input is drawn on its own, within its distribution.
#include <doctest/doctest.h>

#include "tasks/inputs.hpp"
#include "tasks/task_parser.hpp"

using namespace kforge::tasks;

namespace {

task load_one(std::size_t i) {
  auto tasks = load_task_file(std::string(KFORGE_TEST_DATA) + "/data/good.jsonl");
  REQUIRE(tasks.ok());
  return (*tasks)[i];
}

std::vector<std::uint64_t> hashes(const tensor_list& l) {
  auto s = summarize(l);
  REQUIRE(s.ok());
  std::vector<std::uint64_t> h;
  for (const auto& x : *s) h.push_back(x.content_hash);
  return h;
}

}  // namespace

TEST_CASE("input_seed is stable and separates task, seed and input") {
  const auto s = input_seed("l1/relu", 7, "x");
  CHECK(s == input_seed("l1/relu", 7, "x"));
  CHECK(s < (1ull << 32));
  CHECK(s != input_seed("l1/relu", 8, "x"));
  CHECK(s != input_seed("l1/relu", 7, "y"));
  CHECK(s != input_seed("l1/gelu", 7, "x"));
  // Fixed for all time (FNV-1a of "l1/relu\0" + 8 seed bytes + "\0x", folded): recordings and
  // reproductions rely on the same numbers coming back in every process and on every host.
  CHECK(input_seed("l1/relu", 0, "x") == 0xfa5daa10ull);
}

TEST_CASE("the same seed gives bit-identical inputs; another seed different ones") {
  for (std::size_t i = 0; i < 3; ++i) {
    const auto t = load_one(i);
    INFO(t.id);
    auto a = make_inputs(t, 42, std::nullopt, device::cpu());
    auto b = make_inputs(t, 42, std::nullopt, device::cpu());
    auto c = make_inputs(t, 43, std::nullopt, device::cpu());
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    REQUIRE(c.ok());
    CHECK(hashes(*a) == hashes(*b));
    const auto ha = hashes(*a), hc = hashes(*c);
    for (std::size_t k = 0; k < t.inputs.size(); ++k)
      if (t.inputs[k].init.dist != distribution::constant) CHECK(ha[k] != hc[k]);
  }
}

TEST_CASE("an input does not depend on the others: make_input matches make_inputs") {
  const auto t = load_one(1);
  auto all = make_inputs(t, 5, 0, device::cpu());
  REQUIRE(all.ok());
  for (std::size_t k = 0; k < t.inputs.size(); ++k) {
    auto one = make_input(t, k, 5, 0, device::cpu());
    REQUIRE(one.ok());
    CHECK(hashes(*one)[0] == hashes(*all)[k]);
  }
}

TEST_CASE("inputs have the chosen shapes, the declared dtypes, and stay in their ranges") {
  const auto t = load_one(1);  // x uniform [-1, 1) bf16, w uniform bf16, b constant 0.5
  auto in = make_inputs(t, 1, 0, device::cpu());
  REQUIRE(in.ok());
  CHECK(in->shape_of(0) == shape{3, 16});  // variant 0 changes x only
  CHECK(in->shape_of(1) == shape{8, 16});
  CHECK(in->type_of(0).value() == dtype::bfloat16);
  auto s = summarize(*in);
  REQUIRE(s.ok());
  CHECK((*s)[0].max_abs <= 1.0);
  CHECK_FALSE((*s)[0].constant);
  CHECK((*s)[1].max_abs <= 0.25);
  CHECK((*s)[2].constant);
  CHECK((*s)[2].max_abs == 0.5);

  const auto g = load_one(2);  // idx randint [0, 10) int64
  auto gi = make_inputs(g, 1, std::nullopt, device::cpu());
  REQUIRE(gi.ok());
  CHECK(gi->type_of(1).value() == dtype::int64);
  auto gs = summarize(*gi);
  REQUIRE(gs.ok());
  CHECK((*gs)[1].max_abs <= 9);
  CHECK_FALSE((*gs)[1].constant);
}

TEST_CASE("bad requests are errors") {
  const auto t = load_one(0);
  CHECK_FALSE(make_inputs(t, 1, 5, device::cpu()).ok());  // no variant 5
  CHECK_FALSE(make_input(t, 3, 1, std::nullopt, device::cpu()).ok());
  if (!cuda_available()) {
    auto r = make_inputs(t, 1, std::nullopt, device::cuda(0));
    REQUIRE_FALSE(r.ok());
    CHECK(r.message().find("cuda:0") != std::string::npos);
  }
  CHECK(device::parse("cuda:1")->index == 1);
  CHECK_FALSE(device::parse("gpu").ok());
}

TEST_CASE("compare: tolerance |a - e| <= atol + rtol |e|, exact for integers") {
  const auto t = load_one(0);
  auto a = make_inputs(t, 1, 1, device::cpu());
  auto b = make_inputs(t, 2, 1, device::cpu());
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  auto same = compare(*a, *a, tolerance{0, 0});
  REQUIRE(same.ok());
  CHECK(same->close);
  CHECK(same->max_abs_error == 0);
  auto diff = compare(*a, *b, tolerance{1e-4, 1e-4});
  REQUIRE(diff.ok());
  CHECK_FALSE(diff->close);
  CHECK(diff->bad_count > 0);
  CHECK(diff->first_bad >= 0);
  // Loose enough for two standard normals of 17 elements to count as close.
  auto loose = compare(*a, *b, tolerance{100, 0});
  REQUIRE(loose.ok());
  CHECK(loose->close);

  const auto g = load_one(2);
  auto ga = make_inputs(g, 1, std::nullopt, device::cpu());
  auto gb = make_inputs(g, 2, std::nullopt, device::cpu());
  REQUIRE(ga.ok());
  REQUIRE(gb.ok());
  auto ints = compare(ga->pick(1), gb->pick(1), tolerance{100, 100});
  REQUIRE(ints.ok());
  CHECK_FALSE(ints->close);  // integers are exact whatever the tolerance

  auto mismatch = compare(*a, ga->pick(0), tolerance{});
  CHECK_FALSE(mismatch.ok());
}

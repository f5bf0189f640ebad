// Lowering drills: scrambled map references stay lowerable (calls renamed within their argument
// kind, floats redrawn, integers kept). The records `kforge corpus build --lowering-drills N`
// writes: corpus_command_test.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <set>
#include <string>

#include "corpus/lowering_drill.hpp"
#include "tasks/builtin.hpp"

using kforge::corpus::scramble_map_reference;

namespace {

// The name of the first `torch.` call at or after `from`, or empty.
std::string called_name(const std::string& s, std::size_t from = 0) {
  const auto at = s.find("torch.", from);
  if (at == std::string::npos) return {};
  const auto open = s.find('(', at);
  return s.substr(at + 6, open - at - 6);
}

}  // namespace

TEST_CASE("scramble_map_reference renames calls only within their kind of arguments, reductions among reductions") {
  const std::set<std::string> one_tensor = {
      "relu", "sigmoid", "tanh", "exp", "log", "sqrt", "rsqrt", "abs", "sin", "cos", "atan",
      "erf", "expm1", "log1p", "neg", "reciprocal", "square", "floor", "ceil", "round", "trunc",
      "sign", "silu", "mish", "selu", "hardsigmoid", "gelu", "softplus", "elu", "celu", "logit"};
  const std::set<std::string> two_numbers = {"clamp", "threshold"};
  const std::set<std::string> two_tensors = {"maximum", "minimum", "atan2", "mul", "add", "sub", "div"};
  const std::set<std::string> reductions = {"sum", "mean", "amax", "amin", "prod"};
  std::set<std::string> reduced;
  const std::string ref =
      "def forward(x, y):\n    z = torch.threshold(torch.log1p(x), 0.1, 20.0)\n"
      "    return torch.sum(torch.maximum(z, y) * 2, 1)\n";
  std::set<std::string> firsts;
  int moved_numbers = 0;
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    std::mt19937_64 rng(seed);
    const auto s = scramble_map_reference(ref, rng);
    INFO(s);
    REQUIRE(s.rfind("def forward(x, y):\n    z = torch.", 0) == 0);
    const auto first = called_name(s);
    const auto inner = called_name(s, s.find("torch.") + 1);
    CHECK(two_numbers.count(first) == 1);
    CHECK(one_tensor.count(inner) == 1);
    firsts.insert(inner);
    // A reduction becomes another reduction; its integer dim stays, as does the integer operand
    // 2 (an exponent or a count the writer reads as written).
    const auto ret = s.find("    return torch.");
    REQUIRE(ret != std::string::npos);
    const auto reduction = called_name(s, ret);
    CHECK(reductions.count(reduction) == 1);
    reduced.insert(reduction);
    CHECK(two_tensors.count(called_name(s, ret + 11 + reduction.size() + 1)) == 1);
    CHECK(s.find(" 2, 1)\n") != std::string::npos);
    moved_numbers += s.find("0.1, 20.0)") == std::string::npos;
    std::mt19937_64 again(seed);
    CHECK(scramble_map_reference(ref, again) == s);  // the same seed, the same text
  }
  CHECK(firsts.size() >= 15);
  CHECK(reduced.size() == reductions.size());
  CHECK(moved_numbers >= 35);
}

TEST_CASE("scramble_map_reference swaps the operands of two-tensor calls and of operators between names") {
  // v13 wrote atan2f(x0, x1) for `torch.atan2(y, x)` and (x0 - v1) for (x - y).
  const std::string ref = "def forward(x, y):\n    z = torch.maximum(y, x)\n    return z * (x - y.t())\n";
  int call_swapped = 0, operator_swapped = 0;
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    std::mt19937_64 rng(seed);
    const auto s = scramble_map_reference(ref, rng);
    INFO(s);
    const auto open = s.find('(', s.find("z = torch."));
    REQUIRE(open != std::string::npos);
    const std::string args = s.substr(open, 6);
    CHECK((args == "(y, x)" || args == "(x, y)"));
    call_swapped += args == "(x, y)";
    // `z * (...)`: z and the parenthesis are not both names; `x - y.t()`: y is an attribute's
    // object, so neither moves.
    CHECK(s.find("    return z ") != std::string::npos);
    CHECK(s.find("(x ") != std::string::npos);
    CHECK(s.find(" y.t())\n") != std::string::npos);
  }
  CHECK(call_swapped >= 10);
  CHECK(call_swapped <= 30);
  const std::string plain = "def forward(x, y):\n    return torch.relu(x - y)\n";
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    std::mt19937_64 rng(seed);
    const auto s = scramble_map_reference(plain, rng);
    INFO(s);
    const auto open = s.find('(', s.find("return torch."));
    const std::string inner = s.substr(open + 1, 5);
    CHECK((inner.rfind("x ", 0) == 0 || inner.rfind("y ", 0) == 0));
    operator_swapped += inner.rfind("y ", 0) == 0;
  }
  CHECK(operator_swapped >= 10);
  CHECK(operator_swapped <= 30);
}

TEST_CASE("scramble_map_reference keeps calls with keyword arguments and unknown calls") {
  const std::string ref =
      "def forward(x):\n    return torch.gelu(x, approximate='tanh') + torch.lerp(x, x, x)\n";
  for (std::uint64_t seed = 1; seed <= 10; ++seed) {
    std::mt19937_64 rng(seed);
    const auto s = scramble_map_reference(ref, rng);
    INFO(s);
    CHECK(s.find("torch.gelu(x, approximate='tanh')") != std::string::npos);
    CHECK(s.find("torch.lerp(x, x, x)") != std::string::npos);
  }
  std::mt19937_64 rng(1);
  CHECK(scramble_map_reference("no forward here", rng) == "no forward here");
}

#ifdef KFORGE_TASKS_WITH_TORCH
namespace {

// Drills from the built-in tasks of `categories`, none excluded.
std::vector<kforge::corpus::drill_record> builtin_drills(
    const std::vector<kforge::tasks::category>& categories, int count, std::uint64_t seed,
    kforge::corpus::lowering_drill_tally& tally) {
  auto all = kforge::tasks::builtin_tasks();
  REQUIRE(all);
  std::vector<kforge::tasks::task> pool;
  for (const auto& t : *all)
    if (std::find(categories.begin(), categories.end(), t.category) != categories.end())
      pool.push_back(t);
  REQUIRE(!pool.empty());
  kforge::tasks::synth::exclusion_list none;
  return kforge::corpus::lowering_drills(pool, kforge::tasks::prompt_template::embedded(), {},
                                         none, count, seed, &tally);
}

}  // namespace

TEST_CASE("lowering drills of matrix products end with the fused epilogue and read renamed inputs") {
  kforge::corpus::lowering_drill_tally tally;
  const auto drills = builtin_drills({kforge::tasks::category::gemm}, 200, 7, tally);
  const auto builtin = kforge::tasks::builtin_tasks();
  REQUIRE(builtin);
  INFO("written " << tally.written << ", unsupported " << tally.unsupported);
  int epilogues = 0, renamed = 0;
  for (const auto& d : drills) {
    INFO(d.prompt << "\n---\n" << d.completion);
    const auto& c = d.completion;
    REQUIRE(c.size() > 3);
    CHECK(c.substr(c.size() - 3) == "\n}\n");
    const auto store = c.find("void kf_store(const kf_epi_args& e, int64_t i, float acc) {\n");
    if (store == std::string::npos) continue;  // a product staged into a row program: no drill
    ++epilogues;
    CHECK(c.find("\n}\n", store) == c.size() - 3);
    CHECK(c.find("e.p.out[0][w0] = ") != std::string::npos);
    // The layout comments name the product's operands as the prompt declares them.
    const auto a = c.find("// A is `");
    REQUIRE(a != std::string::npos);
    const auto name = c.substr(a + 9, c.find('`', a + 9) - a - 9);
    CHECK(d.prompt.find("] `" + name + "`: float32") != std::string::npos);
    const auto source = d.task_id.substr(d.task_id.find('/', 9) + 1);  // "lowering/N/<source>"
    for (const auto& t : *builtin) {
      if (t.id != source) continue;
      bool kept = false;
      for (const auto& in : t.inputs) kept = kept || in.name == name;
      renamed += !kept;
    }
  }
  CHECK(epilogues == tally.written);
  CHECK(epilogues > 50);
  CHECK(renamed > 20);
  CHECK(renamed < epilogues);
}

TEST_CASE("lowering drills of row programs end with the row kernel") {
  kforge::corpus::lowering_drill_tally tally;
  const auto drills = builtin_drills(
      {kforge::tasks::category::reduction, kforge::tasks::category::normalization}, 200, 3, tally);
  INFO("written " << tally.written << ", unsupported " << tally.unsupported);
  int rows = 0;
  for (const auto& d : drills) {
    INFO(d.prompt << "\n---\n" << d.completion);
    const auto& c = d.completion;
    const auto kernel = c.find("__global__ void kf_rows_kernel(");
    REQUIRE(kernel != std::string::npos);
    ++rows;
    CHECK(c.substr(c.size() - 3) == "\n}\n");
    CHECK(c.find("\n}\n", kernel) == c.size() - 3);  // the kernel's own end, no host code after it
    CHECK(c.find("kf_forward") == std::string::npos);
  }
  CHECK(rows == tally.written);
  CHECK(rows > 50);
}
#endif

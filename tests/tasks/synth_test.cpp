// Task synthesis: the generator and its canonical signature, rendering into tasks that load back,
// the filters that need no execution (duplicate, contamination, size), and, with LibTorch, each
// execution-driven filter rejecting a crafted task for its own reason, and an end-to-end run.
#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <unistd.h>

#include "tasks/synth.hpp"
#include "tasks/task_parser.hpp"
#include "task_builders.hpp"
#ifdef KFORGE_TASKS_WITH_TORCH
#include "tasks/inputs.hpp"
#include "tasks/reference.hpp"
#include "tasks/synth_run.hpp"
#endif

using namespace kforge::tasks;
namespace synth = kforge::tasks::synth;
using json = nlohmann::json;

namespace {

std::string temp_path(const std::string& name) {
  return "/tmp/kforge-synth-test-" + std::to_string(::getpid()) + "-" + name;
}

json crafted(const std::string& source) {
  return testing::two_input_task("t/synth", "crafted for a synthesis filter", source, {8, 16},
                                 {3, 5});
}

}  // namespace

// ---- generation ----------------------------------------------------------------------------

TEST_CASE("generation is deterministic in the seed and respects max_ops") {
  for (std::uint64_t seed : {1ull, 2ull, 12345678901ull}) {
    const auto a = synth::generate(seed), b = synth::generate(seed);
    CHECK(a.signature() == b.signature());
    CHECK(to_json_line(synth::render(a)) == to_json_line(synth::render(b)));
  }
  std::set<std::string> signatures;
  synth::generate_options two;
  two.max_ops = 2;
  for (std::uint64_t seed = 0; seed < 200; ++seed) {
    signatures.insert(synth::generate(seed).signature());
    const auto p = synth::generate(seed, two);
    CHECK(p.steps.size() >= 1);
    CHECK(p.steps.size() <= 2);
  }
  CHECK(signatures.size() > 150);  // seeds give different chains
}

TEST_CASE("rendered tasks follow the task format and load back unchanged") {
  std::map<std::string, int> per_category;
  for (std::uint64_t seed = 0; seed < 300; ++seed) {
    const auto p = synth::generate(synth::mix(99, seed));
    const auto t = synth::render(p);
    INFO(t.reference);
    REQUIRE_MESSAGE(check_task(t).ok(), check_task(t).message());
    const auto line = to_json_line(t);
    auto back = parse_task(line, "synth");
    REQUIRE_MESSAGE(back.ok(), (back.ok() ? "" : back.message()));
    CHECK(to_json_line(*back) == line);

    CHECK(t.id.rfind("synth/", 0) == 0);
    CHECK(t.provenance == "synth:" + std::to_string(p.seed) + ":" + p.signature());
    CHECK(synth::provenance_signature(t) == p.signature());
    CHECK(t.category == (p.steps.size() == 1 ? p.steps[0].cat : category::fused));
    CHECK(t.outputs.at(0).shape == p.output_shape(synth::primary));
    REQUIRE(t.variants.size() == 2);
    // The small variant is the smallest shapes, and CI-sized.
    CHECK(smallest_shapes(t) == shape_choice{1});
    std::int64_t small = 0;
    for (const auto& s : input_shapes(t, 1)) small += numel(s);
    CHECK(small < 100000);
    // Every input of the primary shapes within the memory limit.
    for (const auto& in : t.inputs) CHECK(numel(in.shape) <= synth::max_primary_numel);
    ++per_category[std::string(to_string(t.category))];
  }
  CHECK(per_category["fused"] > 100);
}

TEST_CASE("every op of the catalogue occurs in generated chains") {
  std::set<std::string> used;
  for (std::uint64_t seed = 0; seed < 3000; ++seed)
    for (const auto& st : synth::generate(seed).steps) used.insert(st.op);
  for (const auto& op : synth::catalogue())
    CHECK_MESSAGE(used.count(std::string(op.name)), op.name);
}

TEST_CASE("functions with a domain follow only ops whose values are in it; operators occur") {
  // log, rsqrt, reciprocal and logit on a normal input give NaN or inf: they may follow only ops
  // with positive values (logit: sigmoid's, in (0, 1)); and references written with operators
  // (`y * z1`, `y / (1 + torch.abs(y))`), as the built-ins are, occur.
  const std::set<std::string> positive{"sigmoid", "exp", "softplus"};
  const std::set<std::string> non_negative{"sigmoid", "exp", "softplus", "relu", "abs", "square"};
  int restricted = 0, operators = 0;
  for (std::uint64_t seed = 0; seed < 5000; ++seed) {
    const auto p = synth::generate(seed);
    for (std::size_t i = 0; i < p.steps.size(); ++i) {
      const auto& op = p.steps[i].op;
      const std::string prev = i ? p.steps[i - 1].op : "";
      INFO(p.signature());
      if (op == "log" || op == "rsqrt" || op == "reciprocal") {
        CHECK(positive.count(prev));
        ++restricted;
      } else if (op == "logit") {
        CHECK(prev == "sigmoid");
        ++restricted;
      } else if (op == "sqrt" || op == "log1p") {
        CHECK(non_negative.count(prev));
        ++restricted;
      }
      if (p.steps[i].expr.find("torch.") == std::string::npos) ++operators;
    }
  }
  CHECK(restricted > 10);
  CHECK(operators > 50);
}

TEST_CASE("reductions are spelled three ways, as references are written; the signature ignores it") {
  // [1] with keepdim by position, an int dim with keepdim=True by keyword, and a dim from the end:
  // the built-ins use the last two, which a policy trained on the first alone misread.
  std::set<std::string> seen;
  for (std::uint64_t seed = 0; seed < 3000 && seen.size() < 3; ++seed) {
    const auto p = synth::generate(seed);
    for (const auto& st : p.steps) {
      if (st.op != "sum" && st.op != "mean" && st.op != "amax" && st.op != "amin") continue;
      INFO(st.expr);
      const bool listed = st.expr.find(", [") != std::string::npos;
      const bool keyword = st.expr.find("keepdim=True") != std::string::npos;
      const bool from_end = st.expr.find(", -") != std::string::npos;
      CHECK(!(listed && keyword));
      if (listed) seen.insert("listed");
      if (keyword) seen.insert("keyword");
      if (from_end) seen.insert("from_end");
      CHECK(st.signature.find("keepdim") == std::string::npos);  // one signature, whatever the spelling
    }
    CHECK(to_json_line(synth::render(p)) == to_json_line(synth::render(synth::generate(seed))));
  }
  CHECK(seen == std::set<std::string>{"from_end", "keyword", "listed"});
}

TEST_CASE("the canonical signature names ops and parameters, not sizes") {
  // Seeds that give one signature at different sizes (single-op chains repeat soon).
  std::map<std::string, std::vector<synth::program>> by_signature;
  for (std::uint64_t seed = 0; seed < 400; ++seed) {
    auto p = synth::generate(seed);
    by_signature[p.signature()].push_back(std::move(p));
  }
  const synth::program* a = nullptr;
  const synth::program* b = nullptr;
  for (const auto& [sig, progs] : by_signature)
    for (std::size_t i = 1; i < progs.size() && !b; ++i)
      if (synth::render(progs[0]).inputs[0].shape != synth::render(progs[i]).inputs[0].shape) {
        a = &progs[0];
        b = &progs[i];
      }
  REQUIRE(b != nullptr);
  CHECK(a->signature() == b->signature());
  CHECK(synth::render(*a).id != synth::render(*b).id);  // ids tell the sizes apart

  synth::static_filter filter({}, 1e-9, 1e9);
  CHECK_FALSE(filter.admit(*a, synth::render(*a)).has_value());
  std::string why;
  CHECK(filter.admit(*b, synth::render(*b), &why) == synth::reject_reason::duplicate);
  CHECK(why.find(a->signature()) != std::string::npos);
}

TEST_CASE("size bound: a program whose estimated time is outside the window is rejected") {
  const auto p = synth::generate(5);
  const double est = p.estimate_ms();
  CHECK(est > 0);
  synth::static_filter within({}, est / 2, est * 2);
  CHECK_FALSE(within.admit(p, synth::render(p)).has_value());
  synth::static_filter above({}, est * 10, est * 20);
  CHECK(above.admit(p, synth::render(p)) == synth::reject_reason::size);
  synth::static_filter below({}, est / 20, est / 10);
  CHECK(below.admit(p, synth::render(p)) == synth::reject_reason::size);
  // The generator scales the batch into the window it is given, mostly (the batch is capped).
  int inside = 0;
  for (std::uint64_t seed = 0; seed < 200; ++seed) {
    const auto q = synth::generate(seed);
    inside += q.estimate_ms() >= 0.1 && q.estimate_ms() <= 20.0;
  }
  CHECK(inside >= 180);
  // A later window gives the same chains (the target is drawn last), with batches no smaller.
  synth::generate_options slow;
  slow.min_ms = 5.0;
  slow.max_ms = 50.0;
  int larger = 0;
  for (std::uint64_t seed = 0; seed < 200; ++seed) {
    const auto q = synth::generate(seed), r = synth::generate(seed, slow);
    REQUIRE(q.signature() == r.signature());
    CHECK(r.estimate_ms() >= q.estimate_ms());
    larger += r.estimate_ms() > q.estimate_ms();
  }
  // Not all: a batch at its cap (or at the memory bound) cannot grow; maps, most of the catalogue
  // since it covers the writer's elementwise functions, reach it soonest.
  CHECK(larger > 80);
}

// ---- contamination -------------------------------------------------------------------------

TEST_CASE("op skeleton and normalized reference ignore naming, nesting and layout") {
  auto t = testing::parse_or_fail(
      crafted("def forward(x, y):\n    h = torch.linear(x, y)\n    return torch.relu(h)\n"));
  auto nested = testing::parse_or_fail(
      crafted("def forward(a, b):  # nested\n    return torch.relu(torch.linear(a, b))\n"));
  CHECK(synth::op_skeleton(t) == "2:linear,relu");
  CHECK(synth::op_skeleton(nested) == "2:linear,relu");

  auto ops = testing::parse_or_fail(crafted(
      "def forward(x, y):\n    return torch.gelu(x + y) * 1e-5 - torch.sum(x, -1, True) ** 2\n"));
  CHECK(synth::op_skeleton(ops) == "2:add,gelu,mul,pow,sub,sum");
  auto calls = testing::parse_or_fail(crafted(
      "def forward(x, y):\n    return torch.sub(torch.mul(torch.gelu(torch.add(x, y)), 1e-5), "
      "torch.sum(x, -1, True) ** 2)\n"));
  CHECK(synth::op_skeleton(calls) == synth::op_skeleton(ops));

  CHECK(synth::normalized_reference("def forward(x, y):\n    z = x + y\n    return z\n") ==
        synth::normalized_reference("def forward(a,b):\n  c = a+b   # sum\n  return c\n"));
  CHECK(synth::normalized_reference("def forward(x, y):\n    return x + y\n") !=
        synth::normalized_reference("def forward(x, y):\n    return x - y\n"));
}

TEST_CASE("contamination: listed tasks match by signature, reference or op skeleton") {
  synth::exclusion_list ex;
  auto listed = testing::parse_or_fail(
      crafted("def forward(x, y):\n    return torch.relu(torch.linear(x, y))\n"));
  listed.id = "bench/linear_relu";
  ex.add(listed);
  auto earlier = testing::parse_or_fail(crafted("def forward(x, y):\n    return x * y\n"));
  earlier.id = "bench/from_synth";
  earlier.provenance = "synth:7:mat:mul(z)>relu";
  ex.add(earlier);
  CHECK(ex.size() == 2);

  auto same_ops = testing::parse_or_fail(
      crafted("def forward(x, y):\n    h = torch.linear(x, y)\n    return torch.relu(h)\n"));
  auto m = ex.match(same_ops, "mat:linear>relu");
  REQUIRE(m.has_value());
  CHECK(m->find("bench/linear_relu") != std::string::npos);

  auto other = testing::parse_or_fail(
      crafted("def forward(x, y):\n    return torch.gelu(torch.linear(x, y))\n"));
  CHECK_FALSE(ex.match(other, "mat:linear>gelu").has_value());
  m = ex.match(other, "mat:mul(z)>relu");  // the signature alone matches
  REQUIRE(m.has_value());
  CHECK(m->find("same signature") != std::string::npos);

  // Through the static filter, and from files.
  const auto file = temp_path("exclude.jsonl");
  {
    std::ofstream f(file);
    f << to_json_line(listed) << "\n";
  }
  synth::exclusion_list from_file;
  REQUIRE(from_file.add_file(file).ok());
  CHECK(from_file.size() == 1);
  auto p = synth::generate(3);
  synth::static_filter filter(from_file, 1e-9, 1e9);
  auto t = synth::render(p);
  t.reference = same_ops.reference;
  t.inputs = same_ops.inputs;
  CHECK(filter.admit(p, t) == synth::reject_reason::contaminated);
  std::remove(file.c_str());

  CHECK_FALSE(from_file.add_file(temp_path("missing.jsonl")).ok());
  synth::exclusion_list builtin;
  REQUIRE(builtin.add_file("builtin").ok());
  CHECK(builtin.size() > 150);
}

#ifdef KFORGE_TASKS_WITH_TORCH
// ---- execution-driven filters --------------------------------------------------------------

namespace {

synth::screen_result screen(const json& j, synth::screen_options o = {}) {
  const auto t = testing::parse_or_fail(j);
  if (o.shapes == std::vector<shape_choice>{std::nullopt}) o.shapes = {0};
  return synth::screen(t, o);
}

std::string reason_of(const synth::screen_result& r) {
  return r.reason ? std::string(synth::to_string(*r.reason)) + ": " + r.detail : "kept";
}

#define CHECK_REJECTS(result, expected)                                         \
  do {                                                                          \
    const auto r_ = (result);                                                   \
    CHECK_MESSAGE((r_.reason && *r_.reason == (expected)), reason_of(r_));      \
  } while (0)

}  // namespace

TEST_CASE("screen keeps an honest task") {
  auto r = screen(crafted("def forward(x, y):\n    return torch.relu(x) + y\n"));
  CHECK_MESSAGE(r.ok(), reason_of(r));
}

TEST_CASE("rejected: a reference that does not compile or does not run") {
  CHECK_REJECTS(screen(crafted("def forward(x, y):\n    return torch.not_an_op(x)\n")),
                synth::reject_reason::does_not_run);
  CHECK_REJECTS(screen(crafted("def forward(x, y):\n    return torch.mm(x, y)\n")),
                synth::reject_reason::does_not_run);
}

TEST_CASE("rejected: outputs that differ from the declared shapes (meta tensors)") {
  // Declared [8, 16]; the reference gives [8, 1]. Found without running the primary shapes.
  CHECK_REJECTS(screen(crafted("def forward(x, y):\n    return torch.sum(x + y, [1], True)\n")),
                synth::reject_reason::shape_mismatch);
  // At a variant, against the shapes the rules predicted.
  synth::screen_options o;
  o.shapes = {0};
  o.expected = {{{3, 4}}};
  CHECK_REJECTS(screen(crafted("def forward(x, y):\n    return x + y\n"), o),
                synth::reject_reason::shape_mismatch);
}

TEST_CASE("rejected: NaN or Inf") {
  CHECK_REJECTS(
      screen(crafted("def forward(x, y):\n    return torch.log(-torch.abs(x) - 1.0) + y\n")),
      synth::reject_reason::nan_inf);
}

TEST_CASE("rejected: not deterministic (two runs differ)") {
  CHECK_REJECTS(screen(crafted("def forward(x, y):\n    return x + y + torch.rand_like(x)\n")),
                synth::reject_reason::nondeterministic);
}

TEST_CASE("rejected: constant output") {
  CHECK_REJECTS(screen(crafted("def forward(x, y):\n    return (x + y) * 0.0\n")),
                synth::reject_reason::constant);
  CHECK_REJECTS(screen(crafted("def forward(x, y):\n    return torch.zeros_like(x) + 3.0\n")),
                synth::reject_reason::constant);
}

TEST_CASE("rejected: output does not vary with an input") {
  CHECK_REJECTS(screen(crafted("def forward(x, y):\n    return torch.relu(x)\n")),
                synth::reject_reason::input_independent);
  // A per-row bias cancelled by a softmax over the row.
  CHECK_REJECTS(screen(crafted("def forward(x, y):\n    return torch.softmax(x + torch.sum(y, "
                               "[1], True), 1)\n")),
                synth::reject_reason::input_independent);
}

TEST_CASE("rejected: near zero everywhere, or mostly below atol") {
  CHECK_REJECTS(screen(crafted("def forward(x, y):\n    return (x + y) * 1e-7\n")),
                synth::reject_reason::near_zero);
  CHECK_REJECTS(screen(crafted("def forward(x, y):\n    return (x + y) * 1e-5\n")),
                synth::reject_reason::near_zero);
}

TEST_CASE("rejected: a reference that modifies an input") {
  CHECK_REJECTS(screen(crafted("def forward(x, y):\n    x.add_(1.0)\n    return x + y\n")),
                synth::reject_reason::modifies_input);
}

TEST_CASE("rejected: runtime outside the window (timed; here on the CPU)") {
  synth::screen_options o;
  o.time = true;
  o.trials = 3;
  o.warmup = 1;
  o.min_ms = 1000.0;
  o.max_ms = 2000.0;
  auto r = screen(crafted("def forward(x, y):\n    return x + y\n"), o);
  CHECK_REJECTS(r, synth::reject_reason::runtime);
  CHECK(r.median_ms >= 0.0);
  o.min_ms = 0.0;
  r = screen(crafted("def forward(x, y):\n    return x + y\n"), o);
  CHECK_MESSAGE(r.ok(), reason_of(r));
}

TEST_CASE("problems sort into reasons; the root cause wins") {
  using R = synth::reject_reason;
  CHECK(synth::classify_problem("output 'z' has NaN or Inf") == R::nan_inf);
  CHECK(synth::classify_problem("task 't': reference: does not compile: ...") == R::does_not_run);
  CHECK(synth::worst({R::input_independent, R::constant, R::near_zero}) == R::constant);
  CHECK(synth::worst({R::near_zero, R::nan_inf}) == R::nan_inf);
}

TEST_CASE("shape rules agree with LibTorch at every size set") {
  // On meta tensors where LibTorch has meta kernels (1.13 lacks relu, abs, batch_norm, conv, ...);
  // else by running the variants (the primary shapes are too large for a CPU test).
  int meta_skipped = 0;
  for (std::uint64_t seed = 0; seed < 150; ++seed) {
    const auto p = synth::generate(synth::mix(5, seed));
    const auto t = synth::render(p);
    INFO(t.reference);
    auto ref = reference::compile(t);
    REQUIRE_MESSAGE(ref.ok(), (ref.ok() ? "" : ref.message()));
    for (std::size_t set : {synth::primary, synth::medium, synth::small}) {
      const shape_choice which = set == synth::primary ? shape_choice{} : shape_choice{set - 1};
      auto got = ref->output_shapes(input_shapes(t, which));
      if (got) {
        CHECK(got->at(0) == p.output_shape(set));
        continue;
      }
      ++meta_skipped;
      if (set == synth::primary) continue;
      auto in = make_inputs(t, 1, which, device::cpu());
      REQUIRE(in.ok());
      auto out = ref->run(*in);
      REQUIRE_MESSAGE(out.ok(), (out.ok() ? "" : out.message()));
      CHECK(out->shape_of(0) == p.output_shape(set));
    }
  }
  MESSAGE("no meta kernel in this LibTorch for " << meta_skipped << " of 450 shape sets");
}

// ---- end to end ----------------------------------------------------------------------------

namespace {

struct synth_run {
  synth::synth_report report;
  std::string jsonl, log;
};

synth_run run_synth(const synth::synth_options& o) {
  std::ostringstream jsonl, log;
  auto r = synth::synthesize(o, jsonl, log);
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.message()));
  return {*r, jsonl.str(), log.str()};
}

}  // namespace

TEST_CASE("synthesize: 5 tasks on the CPU that load back; the same seed gives the same file") {
  synth::synth_options o;
  o.count = 5;
  o.seed = 11;
  const auto a = run_synth(o);
  CHECK(a.report.kept == 5);
  int rejected = 0;
  for (int n : a.report.rejected) rejected += n;
  CHECK(a.report.kept + rejected == a.report.tried);  // every candidate counted once

  task_set_reader reader;
  reader.add_lines(a.jsonl, "synth.jsonl");
  REQUIRE(reader.errors().empty());
  REQUIRE(reader.tasks().size() == 5);
  std::set<std::string> signatures;
  for (const auto& t : reader.tasks()) {
    CHECK(check_task(t).ok());
    CHECK(t.provenance.rfind("synth:", 0) == 0);
    signatures.insert(*synth::provenance_signature(t));
  }
  CHECK(signatures.size() == 5);  // deduplicated

  CHECK(run_synth(o).jsonl == a.jsonl);
  o.seed = 12;
  CHECK(run_synth(o).jsonl != a.jsonl);

  const auto table = synth::format_report(a.report, o);
  CHECK(table.find("runtime NOT measured") != std::string::npos);
  CHECK(table.find("duplicate signature") != std::string::npos);
  CHECK(table.find("kept") != std::string::npos);
}

TEST_CASE("synthesize: --exclude drops what an earlier run made") {
  synth::synth_options o;
  o.count = 5;
  o.seed = 11;
  const auto first = run_synth(o);
  const auto file = temp_path("first.jsonl");
  {
    std::ofstream f(file);
    f << first.jsonl;
  }
  o.exclude = {file};
  const auto second = run_synth(o);
  std::remove(file.c_str());
  CHECK(second.report.rejected[static_cast<std::size_t>(synth::reject_reason::contaminated)] >=
        5);
  task_set_reader a, b;
  a.add_lines(first.jsonl, "a");
  b.add_lines(second.jsonl, "b");
  std::set<std::string> before;
  for (const auto& t : a.tasks()) before.insert(*synth::provenance_signature(t));
  for (const auto& t : b.tasks()) CHECK_FALSE(before.count(*synth::provenance_signature(t)));

  o.exclude = {temp_path("missing.jsonl")};
  std::ostringstream sink;
  CHECK_FALSE(synth::synthesize(o, sink, sink).ok());
}

TEST_CASE("synthesize: bad options are errors; limits stop it with counts intact") {
  std::ostringstream sink;
  synth::synth_options o;
  o.count = 0;
  CHECK_FALSE(synth::synthesize(o, sink, sink).ok());
  o.count = 5;
  o.max_ops = 6;
  CHECK_FALSE(synth::synthesize(o, sink, sink).ok());
  o.max_ops = 5;
  o.min_ms = 5;
  o.max_ms = 1;
  CHECK_FALSE(synth::synthesize(o, sink, sink).ok());

  o = {};
  o.count = 1000;
  o.max_tries = 3;
  auto r = run_synth(o);
  CHECK(r.report.tried == 3);
  CHECK(r.report.kept <= 3);
}
#endif

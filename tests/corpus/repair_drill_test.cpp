// Repair drills (corpus/repair_drill.hpp): each breakage edits one place of a corpus kernel, and
// `kforge corpus build --repair-drills` writes two-turn records whose observation is the sandbox's
// real verdict of the broken kernel (compile-only; skipped with a message without a toolchain).
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "corpus/corpus_command.hpp"
#include "corpus/repair_drill.hpp"
#include "sandbox/toolchain.hpp"
#include "tasks/builtin.hpp"
#include "tests/json_lines.hpp"

using namespace kforge;
namespace fs = std::filesystem;
using json = nlohmann::json;

#ifdef KFORGE_TASKS_WITH_TORCH
namespace {

// The corpus writer's first variant of built-in task `id`, or its variant named `name`.
corpus::kernel_variant variant_of(const std::string& id, const std::string& name = "") {
  auto library = tasks::builtin_tasks();
  REQUIRE(library.ok());
  for (const auto& t : *library)
    if (t.id == id) {
      auto ks = corpus::write_kernels(t);
      REQUIRE(ks.ok());
      for (const auto& k : *ks)
        if (name.empty() || k.name == name) return k;
    }
  FAIL("no variant " << name << " of " << id);
  return {};
}

corpus::kernel_variant relu_variant() { return variant_of("l1/relu"); }

}  // namespace

TEST_CASE("each breakage makes one edit of its kind") {
  const auto v = relu_variant();
  std::mt19937_64 rng(3);
  const auto semis = [](const std::string& s) { return std::count(s.begin(), s.end(), ';'); };
  const auto dropped = corpus::break_source(v.source, corpus::breakage::drop_semicolon, rng);
  REQUIRE(dropped);
  CHECK(semis(*dropped) == semis(v.source) - 1);
  CHECK(dropped->size() == v.source.size() - 1);
  const auto entry = corpus::break_source(v.source, corpus::breakage::entry_point_name, rng);
  REQUIRE(entry);
  CHECK(entry->find("int kf_forward(") == std::string::npos);
  CHECK(entry->find("int kf_foward(") != std::string::npos);
  const auto include = corpus::break_source(v.source, corpus::breakage::no_include, rng);
  REQUIRE(include);
  CHECK(include->find("#include <kforge/kernel_abi.h>") == std::string::npos);
  const auto name = corpus::break_source(v.source, corpus::breakage::undeclared_name, rng);
  REQUIRE(name);
  CHECK(name->size() == v.source.size() + 1);  // one use of one name, one letter longer
  CHECK(*name != v.source);
  // The same seed draws the same edit.
  std::mt19937_64 again(3);
  CHECK(corpus::break_source(v.source, corpus::breakage::drop_semicolon, again) == dropped);
  // A source without the place has no such breakage.
  CHECK_FALSE(corpus::break_source("int x;\n", corpus::breakage::no_include, rng));
}

TEST_CASE("the breakages only a run shows: a grid rounded down, a sum started at 1, a changed constant") {
  std::mt19937_64 rng(5);
  const auto relu = variant_of("l1/relu", "naive");
  REQUIRE(relu.source.find("(n + 255) / 256") != std::string::npos);
  const auto grid = corpus::break_source(relu.source, corpus::breakage::grid_rounded_down, rng);
  REQUIRE(grid);
  CHECK(grid->find("(n + 255) / 256") == std::string::npos);
  CHECK(grid->find("= n / 256;") != std::string::npos);
  // kf_op's `x0 > 0.0f ? x0 : 0.0f`: one of its two zeros becomes 1.0f, nothing outside kf_op moves.
  const auto op = corpus::break_source(relu.source, corpus::breakage::op_constant, rng);
  REQUIRE(op);
  CHECK(op->size() == relu.source.size());
  const auto body = [](const std::string& s) { return s.substr(s.find("void kf_op("), s.find("__global__") - s.find("void kf_op(")); };
  CHECK(body(*op).find("1.0f") != std::string::npos);
  CHECK(op->substr(op->find("__global__")) == relu.source.substr(relu.source.find("__global__")));
  // No sum in relu; in a row sum the accumulator starts at 1.
  CHECK_FALSE(corpus::break_source(relu.source, corpus::breakage::sum_starts_at_one, rng));
  const auto rows = variant_of("l1/sum_rows");
  const auto sum = corpus::break_source(rows.source, corpus::breakage::sum_starts_at_one, rng);
  REQUIRE(sum);
  CHECK(sum->find("acc = 0.0f;") == std::string::npos);
  CHECK(sum->find(" acc = 1.0f;") != std::string::npos);  // float or double, as the variant sums
  for (const auto b : {corpus::breakage::grid_rounded_down, corpus::breakage::sum_starts_at_one,
                       corpus::breakage::op_constant})
    CHECK(corpus::shows_only_when_run(b));
  for (const auto b : {corpus::breakage::drop_semicolon, corpus::breakage::undeclared_name,
                       corpus::breakage::entry_point_name, corpus::breakage::no_include})
    CHECK_FALSE(corpus::shows_only_when_run(b));
}

TEST_CASE("corpus build --repair-drills writes the broken kernel, the sandbox's observation and the kernel") {
  if (const auto tc = sandbox::find_toolchain(); !tc) {
    MESSAGE("skipped: no CUDA toolchain (" << tc.message() << ")");
    return;
  }
  const fs::path dir = fs::temp_directory_path() / ("kforge-repair-drills-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  corpus::corpus_options o;
  o.tasks = "builtin";
  o.categories = {"elementwise"};
  o.out = dir.string();
  o.repair_drills = 4;
  std::ostringstream out, err;
  REQUIRE_MESSAGE(corpus::corpus_command(o, out, err) == 0, err.str());
  CHECK(out.str().find(", 4 repair drills (of 4 drawn: 0 still built)") != std::string::npos);
  std::map<std::pair<std::string, std::string>, std::string> kernels;  // (task, variant) -> completion
  std::map<std::string, int> edits;
  for (const auto& r : testing::read_json_lines(dir / "sft.jsonl")) {
    if (!r.contains("turns")) {
      kernels[{r["task_id"], r["variant"]}] = r["completion"];
      continue;
    }
    INFO(r.dump(2));
    CHECK(r["drill"] == "repair");
    ++edits[r["edit"].get<std::string>()];
    const auto& turns = r["turns"];
    REQUIRE(turns.size() == 2);
    CHECK(turns[0]["train"] == false);
    const std::string observation = turns[0]["observation"];
    CHECK((observation.rfind("## Turn 1: compile error", 0) == 0 || observation.rfind("## Turn 1: link error", 0) == 0));
    CHECK(observation.find("write the whole file again") != std::string::npos);
    CHECK_FALSE(turns[1].contains("observation"));
    // The second turn is a kept kernel's own completion; the first differs from it.
    const auto it = kernels.find({r["task_id"], r["variant"]});
    REQUIRE(it != kernels.end());
    CHECK(turns[1]["completion"] == it->second);
    CHECK(turns[0]["completion"] != it->second);
    CHECK(r["prompt"].get<std::string>().find(r["task_id"].get<std::string>()) != std::string::npos);
  }
  CHECK(edits.size() == 4);  // every breakage once
  std::error_code ec;
  fs::remove_all(dir, ec);
}
#endif

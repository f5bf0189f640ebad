#include "model/tokenizer_command.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <sstream>

#include <nlohmann/json.hpp>

#include "model/tokenizer.hpp"
#include "tests/model/test_files.hpp"

using namespace kforge::model;
using namespace kforge::model::testing;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::string record(const std::string& prompt, const std::string& completion) {
  return nlohmann::json{{"prompt", prompt}, {"completion", completion}, {"id", 1}}.dump() + "\n";
}

struct run_result {
  int code;
  std::string out, err;
};

run_result run(const tokenizer_train_options& opt) {
  std::ostringstream out, err;
  const int code = tokenizer_train_command(opt, out, err);
  return {code, out.str(), err.str()};
}

}  // namespace

TEST_CASE("kforge tokenizer train: trains on JSON Lines fields and writes a loadable tokenizer") {
  scratch_dir dir;
  std::string lines;
  for (int i = 0; i < 50; ++i)
    lines += record("Write a CUDA kernel for relu over " + std::to_string(i * 1024) + " floats.",
                    "__global__ void relu(float* x, int n) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                    "  if (i < n) x[i] = fmaxf(x[i], 0.0f);\n}\n");
  write_text(dir.path("a.jsonl"), lines);
  write_text(dir.path("b.jsonl"), "\n" + record("ünïcödé ✓", "<|im_end|>") + "\n");

  tokenizer_train_options opt;
  opt.inputs = {dir.path("a.jsonl"), dir.path("b.jsonl")};
  opt.vocab_size = 300;
  opt.out = dir.path("tok");
  const auto r = run(opt);
  CAPTURE(r.err);
  REQUIRE(r.code == 0);
  CHECK(contains(r.out, "input: 102 texts (fields prompt,completion) from 2 file(s)"));
  CHECK(contains(r.out, "vocab: 300 (256 bytes + 41 merged + 3 special)"));
  CHECK(contains(r.out, "bytes/token"));
  CHECK(contains(r.out, "s total"));
  auto tok = tokenizer::load(dir.path("tok"));
  REQUIRE(tok.ok());
  CHECK(tok->vocab_size() == 300);
  const std::string code = "__global__ void relu(float* x, int n) {\n  int i = blockIdx.x;\n}\n";
  CHECK(tok->decode(tok->encode(code)) == code);
  CHECK(tok->encode(code).size() < code.size() / 2);

  // One field only: fewer texts.
  opt.fields = {"completion"};
  opt.out = dir.path("tok2");
  const auto r2 = run(opt);
  REQUIRE(r2.code == 0);
  CHECK(contains(r2.out, "input: 51 texts (fields completion)"));
}

TEST_CASE("kforge tokenizer train: bad input is a clear error, exit 2, nothing written") {
  scratch_dir dir;
  write_text(dir.path("good.jsonl"), record("p", "c") + record("p2", "c2"));
  tokenizer_train_options opt;
  opt.out = dir.path("out");
  opt.vocab_size = 300;

  SUBCASE("missing file") {
    opt.inputs = {dir.path("good.jsonl"), dir.path("missing.jsonl")};
    const auto r = run(opt);
    CHECK(r.code == 2);
    CHECK(contains(r.err, "missing.jsonl: no such file"));
  }
  SUBCASE("a line that is not JSON, named by its number") {
    write_text(dir.path("bad.jsonl"), record("p", "c") + "\n" + "{\"prompt\": \"x\", \n");
    opt.inputs = {dir.path("bad.jsonl")};
    const auto r = run(opt);
    CHECK(r.code == 2);
    CHECK(contains(r.err, "bad.jsonl:3: not valid JSON"));
  }
  SUBCASE("a line that is not an object") {
    write_text(dir.path("bad.jsonl"), "[1, 2]\n");
    opt.inputs = {dir.path("bad.jsonl")};
    const auto r = run(opt);
    CHECK(r.code == 2);
    CHECK(contains(r.err, "bad.jsonl:1: not a JSON object"));
  }
  SUBCASE("a missing field") {
    write_text(dir.path("bad.jsonl"), record("p", "c") + "{\"prompt\": \"only\"}\n");
    opt.inputs = {dir.path("bad.jsonl")};
    const auto r = run(opt);
    CHECK(r.code == 2);
    CHECK(contains(r.err, "bad.jsonl:2: no field 'completion'"));
  }
  SUBCASE("a field that is not a string") {
    write_text(dir.path("bad.jsonl"), "{\"prompt\": 3, \"completion\": \"c\"}\n");
    opt.inputs = {dir.path("bad.jsonl")};
    const auto r = run(opt);
    CHECK(r.code == 2);
    CHECK(contains(r.err, "bad.jsonl:1: field 'prompt' is not a string"));
  }
  SUBCASE("a vocabulary too small for the bytes and the specials") {
    opt.inputs = {dir.path("good.jsonl")};
    opt.vocab_size = 258;
    const auto r = run(opt);
    CHECK(r.code == 2);
    CHECK(contains(r.err, "--vocab"));
    CHECK(contains(r.err, "259"));
  }
  SUBCASE("no records at all") {
    write_text(dir.path("empty.jsonl"), "\n\n");
    opt.inputs = {dir.path("empty.jsonl")};
    const auto r = run(opt);
    CHECK(r.code == 2);
    CHECK(contains(r.err, "no records"));
  }
  SUBCASE("no input, no field, no output") {
    CHECK(run(opt).code == 2);
    opt.inputs = {dir.path("good.jsonl")};
    opt.fields.clear();
    CHECK(run(opt).code == 2);
    opt.fields = {"prompt"};
    opt.out.clear();
    CHECK(run(opt).code == 2);
  }
  CHECK_FALSE(std::filesystem::exists(dir.path("out/tokenizer.json")));
}

// `kforge corpus build`: the files it writes, their agreement with each other, filtering by
// verdicts, copy drills, determinism and its refusals of bad arguments.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "corpus/corpus_command.hpp"
#include "tasks/prompt.hpp"
#include "tests/json_lines.hpp"

using namespace kforge;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

struct temp_dir {
  fs::path p;
  explicit temp_dir(const std::string& tag)
      : p(fs::temp_directory_path() / ("kforge-corpus-" + tag + "-" + std::to_string(::getpid()))) {
    fs::remove_all(p);
    fs::create_directories(p);
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(p, ec);
  }
};

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

std::vector<json> lines(const fs::path& p) { return testing::read_json_lines(p); }

int run(const corpus::corpus_options& o, std::string* out = nullptr, std::string* err = nullptr) {
  std::ostringstream so, se;
  const int rc = corpus::corpus_command(o, so, se);
  if (out) *out = so.str();
  if (err) *err = se.str();
  return rc;
}

}  // namespace

#ifdef KFORGE_TASKS_WITH_TORCH
TEST_CASE("corpus build writes tasks, kernels and sft records that agree") {
  temp_dir d("build");
  corpus::corpus_options o;
  o.tasks = "builtin";
  o.categories = {"elementwise", "normalization"};
  o.out = (d.p / "c").string();
  std::string out, err;
  REQUIRE_MESSAGE(run(o, &out, &err) == 0, err);
  CHECK(out.find("tasks seen") != std::string::npos);
  CHECK(out.find("unsupported:") != std::string::npos);
  const auto tasks = lines(d.p / "c" / "tasks.jsonl");
  const auto sft = lines(d.p / "c" / "sft.jsonl");
  REQUIRE(tasks.size() > 40);
  REQUIRE(sft.size() >= 3 * 40);
  for (const auto& t : tasks) {
    const auto cat = t["category"].get<std::string>();
    CHECK((cat == "elementwise" || cat == "normalization"));
  }
  for (const auto& r : sft) {
    const auto id = r["task_id"].get<std::string>();
    const auto variant = r["variant"].get<std::string>();
    INFO(id << " " << variant);
    CHECK(r["prompt"].get<std::string>().find(id) != std::string::npos);
    CHECK(r["prompt"].get<std::string>().find("unknown") != std::string::npos);
    auto src = tasks::extract_kernel_source(r["completion"].get<std::string>());
    REQUIRE(src.ok());
    CHECK(*src == slurp(d.p / "c" / "kernels" / id / (variant + ".cu")));
    CHECK_FALSE(r.contains("speedup"));
  }
  // The same arguments give the same files.
  o.out = (d.p / "again").string();
  REQUIRE(run(o) == 0);
  CHECK(slurp(d.p / "c" / "sft.jsonl") == slurp(d.p / "again" / "sft.jsonl"));
  CHECK(slurp(d.p / "c" / "tasks.jsonl") == slurp(d.p / "again" / "tasks.jsonl"));

  // --prompt-template: the prompts are that template's, as in a run that names it.
  {
    std::ofstream f(d.p / "mine.txt");
    f << "Task {{task_id}} on {{gpu_name}}:\n{{reference}}\n";
  }
  o.prompt_template = (d.p / "mine.txt").string();
  o.out = (d.p / "mine").string();
  REQUIRE(run(o, nullptr, &err) == 0);
  const auto mine = lines(d.p / "mine" / "sft.jsonl");
  REQUIRE(mine.size() == sft.size());
  CHECK(mine[0]["prompt"] == "Task " + mine[0]["task_id"].get<std::string>() + " on unknown:\n" +
                                 tasks[0]["reference"].get<std::string>());
  CHECK(mine[0]["completion"] == sft[0]["completion"]);
}

TEST_CASE("corpus build keeps only variants with an ok verdict, with their speedup") {
  temp_dir d("verdicts");
  const auto vf = d.p / "verdicts.jsonl";
  {
    std::ofstream f(vf);
    f << json{{"task", "l1/relu"}, {"file", "x/kernels/l1/relu/vec4.cu"}, {"status", "ok"},
              {"speedup", 1.7}}.dump()
      << "\n"
      << json{{"task", "l1/relu"}, {"file", "x/kernels/l1/relu/naive.cu"},
              {"status", "wrong_answer"}}.dump()
      << "\n";
  }
  const auto gf = d.p / "gpu.toml";
  {
    std::ofstream f(gf);
    f << "[tasks.gpu]\nname = \"NVIDIA H200\"\ncompute_capability = \"9.0\"\nsm_count = 132\n";
  }
  corpus::corpus_options o;
  o.categories = {"elementwise"};
  o.out = (d.p / "c").string();
  o.verdicts = vf.string();
  o.gpu_facts = gf.string();
  std::string out, err;
  REQUIRE_MESSAGE(run(o, &out, &err) == 0, err);
  const auto sft = lines(d.p / "c" / "sft.jsonl");
  REQUIRE(sft.size() == 1);
  CHECK(sft[0]["task_id"] == "l1/relu");
  CHECK(sft[0]["variant"] == "vec4");
  CHECK(sft[0]["speedup"].get<double>() == doctest::Approx(1.7));
  CHECK(sft[0]["prompt"].get<std::string>().find("H200") != std::string::npos);
}

TEST_CASE("corpus build takes a task file and synthesized tasks") {
  temp_dir d("files");
  const auto tf = d.p / "t.jsonl";
  {
    std::ofstream f(tf);
    f << R"J({"id": "t/bias_relu", "category": "elementwise", "description": "relu(x + b)",)J"
         R"J( "inputs": [{"name": "x", "shape": [64, 32], "dtype": "float32", "init": {"dist": "normal", "mean": 0.0, "std": 1.0}}, {"name": "b", "shape": [32], "dtype": "float32", "init": {"dist": "normal", "mean": 0.0, "std": 1.0}}],)J"
         R"J( "outputs": [{"name": "y", "shape": [64, 32], "dtype": "float32"}],)J"
         R"J( "reference": "def forward(x, b):\n    return torch.relu(x + b)\n",)J"
         R"J( "variants": [{"x": [3, 32]}]})J"
      << "\n";
  }
  corpus::corpus_options o;
  o.tasks = tf.string();
  o.out = (d.p / "c").string();
  REQUIRE(run(o) == 0);
  CHECK(fs::exists(d.p / "c" / "kernels" / "t" / "bias_relu" / "vec4.cu"));
  o.tasks = "synth:5:3";
  o.out = (d.p / "s").string();
  std::string out, err;
  REQUIRE_MESSAGE(run(o, &out, &err) == 0, err);
  CHECK(out.find("5 tasks seen") != std::string::npos);
}

TEST_CASE("corpus build --copy-drills appends prefix-only restatements of scrambled task sections") {
  temp_dir d("drills");
  corpus::corpus_options o;
  o.tasks = "builtin";
  o.categories = {"elementwise"};
  o.out = (d.p / "c").string();
  o.copy_drills = 40;
  std::string out, err;
  REQUIRE_MESSAGE(run(o, &out, &err) == 0, err);
  CHECK(out.find(", 40 copy drills") != std::string::npos);
  int kernels = 0, drills = 0, scrambled = 0;
  for (const auto& r : lines(d.p / "c" / "sft.jsonl")) {
    if (r["variant"] != "copy_drill") {
      CHECK(drills == 0);  // the drills come after every kernel record
      CHECK_FALSE(r.contains("prefix_only"));
      ++kernels;
      continue;
    }
    ++drills;
    const auto prompt = r["prompt"].get<std::string>();
    const auto completion = r["completion"].get<std::string>();
    INFO(prompt << "\n---\n" << completion);
    CHECK(r["prefix_only"] == true);
    CHECK(prompt.rfind("## Task ", 0) == 0);
    CHECK(prompt.find("## Answer") != std::string::npos);
    CHECK(prompt.find("## The kernel ABI") == std::string::npos);
    REQUIRE(completion.rfind("The reference computes `", 0) == 0);
    REQUIRE(completion.size() > 26);
    CHECK(completion.substr(completion.size() - 2) == "`.");
    // What is restated is in the prompt, line for line.
    const auto body = completion.substr(24, completion.size() - 26);
    std::size_t at = 0;
    for (std::size_t start = 0; start <= body.size();) {
      auto end = body.find("; ", start);
      if (end == std::string::npos) end = body.size();
      const auto stmt = body.substr(start, end - start);
      at = prompt.find(stmt, at);
      CHECK(at != std::string::npos);
      start = end + 2;
    }
    scrambled += r["task_id"].get<std::string>().rfind("drill/", 0) == 0;
  }
  CHECK(kernels > 40);
  CHECK(drills == 40);
  CHECK(scrambled == 40);
}

TEST_CASE("corpus build --lowering-drills appends map kernels of scrambled tasks, cut after kf_op's kernel") {
  temp_dir d("lowering");
  const auto heldout = d.p / "heldout.jsonl";
  {
    // The held-out list: `relu` and `x * y` alone, as the built-in library writes them.
    corpus::corpus_options all;
    all.tasks = "builtin";
    all.categories = {"elementwise"};
    all.out = (d.p / "all").string();
    REQUIRE(run(all, nullptr, nullptr) == 0);
    std::ofstream h(heldout);
    for (const auto& r : lines(d.p / "all" / "tasks.jsonl"))
      if (r["id"] == "l1/relu" || r["id"] == "l1/mul") h << r.dump() << "\n";
  }
  corpus::corpus_options o;
  o.tasks = "builtin";
  o.categories = {"elementwise"};
  o.out = (d.p / "c").string();
  o.lowering_drills = 300;
  o.exclude = {heldout.string()};
  std::string out, err;
  REQUIRE_MESSAGE(run(o, &out, &err) == 0, err);
  INFO(out);
  CHECK(out.find("lowering drills (of 300 drawn: ") != std::string::npos);
  int drills = 0, dense = 0;
  std::set<std::string> bodies;
  for (const auto& r : lines(d.p / "c" / "sft.jsonl")) {
    if (r["variant"] != "lowering_drill") continue;
    ++drills;
    const auto prompt = r["prompt"].get<std::string>();
    const auto completion = r["completion"].get<std::string>();
    INFO(prompt << "\n---\n" << completion);
    CHECK(r["prefix_only"] == true);
    CHECK(prompt.rfind("## Task lowering/", 0) == 0);
    REQUIRE(completion.rfind("The reference computes `", 0) == 0);
    // The kernel record of the scrambled task up to the end of the map kernel after kf_op, which
    // restates the reference; no host code.
    const auto op = completion.find("__device__ __forceinline__ void kf_op(");
    REQUIRE(op != std::string::npos);
    const auto kernel = completion.find("__global__ void kf_map", op);
    REQUIRE(kernel != std::string::npos);
    CHECK(completion.substr(completion.size() - 3) == "\n}\n");
    CHECK(completion.find("\n}\n", kernel) == completion.size() - 3);
    CHECK(completion.find("kf_forward") == std::string::npos);
    // A dense map's kernel takes one pointer per input of kf_op (v14 wrote one for two).
    const auto op_head = completion.substr(op, completion.find(')', op) - op);
    const auto kernel_head = completion.substr(kernel, completion.find(')', kernel) - kernel);
    if (kernel_head.find("in0") != std::string::npos) {
      ++dense;
      const auto count = [](const std::string& h, const std::string& w) {
        int n = 0;
        for (auto at = h.find(w); at != std::string::npos; at = h.find(w, at + 1)) ++n;
        return n;
      };
      CHECK(count(kernel_head, "const float* __restrict__ in") == count(op_head, "float x"));
    }
    const auto restated = completion.substr(24, completion.find("`.") - 24);
    CHECK(completion.find("// One element of the reference: " + restated + "\n") != std::string::npos);
    // Neither held-out reference comes back, in any spelling of its op skeleton.
    CHECK(restated != "return torch.relu(x)");
    CHECK(restated != "return x * y");
    CHECK(restated != "return torch.mul(x, y)");
    bodies.insert(restated);
  }
  CHECK(drills > 150);
  CHECK(dense > 50);
  CHECK(bodies.size() > 100);
  o.exclude = {(d.p / "missing.jsonl").string()};
  CHECK(run(o, nullptr, &err) == 2);
  CHECK(err.find("missing.jsonl") != std::string::npos);
}
#endif

TEST_CASE("corpus build refuses bad arguments with exit code 2") {
  temp_dir d("bad");
  corpus::corpus_options o;
  o.out = (d.p / "c").string();
  std::string err;
  o.categories = {"nonsense"};
  CHECK(run(o, nullptr, &err) == 2);
  CHECK(err.find("nonsense") != std::string::npos);
  o.categories.clear();
  for (const char* spec : {"synth:x:1", "synth:5", "synth:0:1", "/no/such/file.jsonl"}) {
    o.tasks = spec;
    CHECK(run(o, nullptr, &err) == 2);
  }
  o.tasks = "builtin";
  o.gpu_facts = (d.p / "missing.toml").string();
  CHECK(run(o, nullptr, &err) == 2);
  {
    std::ofstream f(d.p / "bad.toml");
    f << "[tasks.gpu]\nsm_cont = 3\n";
  }
  o.gpu_facts = (d.p / "bad.toml").string();
  CHECK(run(o, nullptr, &err) == 2);
  CHECK(err.find("sm_cont") != std::string::npos);
  o.gpu_facts.clear();
  {
    std::ofstream f(d.p / "v.jsonl");
    f << "not json\n";
  }
  o.verdicts = (d.p / "v.jsonl").string();
  CHECK(run(o, nullptr, &err) == 2);
  o.verdicts.clear();
  {
    std::ofstream f(d.p / "t.txt");
    f << "{{task_idd}}\n";
  }
  o.prompt_template = (d.p / "t.txt").string();
  CHECK(run(o, nullptr, &err) == 2);
  CHECK(err.find("task_idd") != std::string::npos);
  o.prompt_template.clear();
  o.out.clear();
  CHECK(run(o, nullptr, &err) == 2);
}

// `kforge tasks import-kernelbench` on KernelBench's own problem files (../shared/kernelbench, test
// data beside the repository): a sample of five, sizes divided by 16 so their references run on a
// CPU, imported and validated (compiled and run in LibTorch, with the degenerate-task checks), one
// of them with inputs derived from drawn tensors (symmetric matrices), drawn here to see they are,
// one with a fixed number among its inputs;
// and bad problem files refused with their reasons. Skipped, saying why, where the problem files or a
// Python with torch are missing.

#include <ATen/ATen.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "common/subprocess.hpp"
#include "tasks/inputs.hpp"
#include "tasks/kernelbench_import.hpp"
#include "tasks/task_parser.hpp"
#include "tests/doctest_torch.hpp"  // last: after every header that may include LibTorch

namespace fs = std::filesystem;

namespace {

const fs::path problems = fs::path(KFORGE_SOURCE_DIR) / ".." / "shared" / "kernelbench";

kforge::process_output run_kforge(const std::vector<std::string>& args) {
  std::vector<std::string> argv{KFORGE_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = kforge::run_process(argv, std::chrono::minutes(10), 4 << 20);
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.message()));
  return *r;
}

std::vector<nlohmann::json> lines_of(const fs::path& p) {
  std::vector<nlohmann::json> out;
  std::ifstream in(p);
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) out.push_back(nlohmann::json::parse(l));
  return out;
}

bool ready() {
  if (!fs::exists(problems / "level1")) {
    MESSAGE("skipped: no KernelBench problem files at " << problems.string());
    return false;
  }
  if (auto py = kforge::tasks::python_with_torch(); !py) {
    MESSAGE("skipped: " << py.message());
    return false;
  }
  return true;
}

}  // namespace

TEST_CASE("KernelBench problems import as kforge tasks whose references run") {
  if (!ready()) return;
  const fs::path dir = fs::temp_directory_path() / ("kforge-kb-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto out = (dir / "kb.jsonl").string();
  const auto r = run_kforge({"tasks", "import-kernelbench", (problems / "level1/19_ReLU.py").string(),
                         (problems / "level1/63_conv_standard_2D__square_input__square_kernel.py").string(),
                         (problems / "level2/12_Gemm_Multiply_LeakyReLU.py").string(),
                         (problems / "level1/13_Matmul_for_symmetric_matrices.py").string(),
                         (problems / "level1/5_Matrix_scalar_multiplication.py").string(), "--out", out, "--scale", "16",
                         "--jobs", "2"});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto tasks = lines_of(out);
  REQUIRE(tasks.size() == 5);
  CHECK(tasks[0].at("id") == "kb/l1/19_ReLU");
  CHECK(tasks[0].at("inputs")[0].at("init").at("dist") == "uniform");  // torch.rand
  // The module's parameters became inputs after the problem's own, with the module's init kind.
  const auto& gemm = tasks[2];
  CHECK(gemm.at("id") == "kb/l2/12_Gemm_Multiply_LeakyReLU");
  REQUIRE(gemm.at("inputs").size() == 3);
  CHECK(gemm.at("inputs")[1].at("name") == "gemm_weight");
  CHECK(gemm.at("inputs")[1].at("init").at("dist") == "uniform");
  CHECK(gemm.at("inputs")[1].at("shape") == nlohmann::json::array({512, 512}));
  // ... marked as the module's parameters; the problem's own input is not.
  CHECK_FALSE(gemm.at("inputs")[0].contains("role"));
  CHECK(gemm.at("inputs")[1].at("role") == "parameter");
  CHECK(gemm.at("inputs")[2].at("role") == "parameter");
  CHECK(gemm.at("reference").get<std::string>().find("torch.leaky_relu") != std::string::npos);
  // Scaled sizes are said, never silent.
  CHECK(gemm.at("description").get<std::string>().find("sizes divided by 16") != std::string::npos);
  CHECK(gemm.at("provenance") == "kernelbench:level2/12_Gemm_Multiply_LeakyReLU.py:scaled/16");
  // get_inputs makes A = (A + A.T) / 2 from a torch.rand draw: the task draws the draw and its
  // prepare computes the input, so every drawn A is symmetric.
  const auto& sym = tasks[3];
  CHECK(sym.at("id") == "kb/l1/13_Matmul_for_symmetric_matrices");
  REQUIRE(sym.contains("draws"));
  CHECK(sym.at("draws").size() == 2);
  CHECK(sym.at("draws")[0].at("init").at("dist") == "uniform");
  CHECK_FALSE(sym.at("inputs")[0].contains("init"));
  auto parsed = kforge::tasks::parse_task(sym.dump(), "kb.jsonl:4");
  REQUIRE_MESSAGE(parsed.ok(), (parsed.ok() ? "" : parsed.message()));
  for (std::uint64_t seed : {1, 2}) {
    auto in = kforge::tasks::make_inputs(*parsed, seed, std::nullopt, kforge::tasks::device::cpu());
    REQUIRE_MESSAGE(in.ok(), (in.ok() ? "" : in.message()));
    for (const auto& m : in->tensors()) {
      CHECK(m.sizes() == at::IntArrayRef({256, 256}));
      CHECK(at::equal(m, m.t()));
    }
  }
  // get_inputs gives the number s = 3.14 besides the matrix, the same on every call: the task takes
  // the matrix alone, and the number is a constant of the reference, said in the description.
  const auto& scalar = tasks[4];
  CHECK(scalar.at("category") == "elementwise");
  REQUIRE(scalar.at("inputs").size() == 1);
  CHECK(scalar.at("inputs")[0].at("name") == "A");
  CHECK(scalar.at("reference").get<std::string>().find("torch.mul(A, 3.14)") != std::string::npos);
  CHECK(scalar.at("description").get<std::string>().find("s = 3.14, fixed by the problem") != std::string::npos);
  // Converted in two worker processes, in the files' order, and as one process converts them.
  const auto serial = (dir / "serial.jsonl").string();
  REQUIRE(run_kforge({"tasks", "import-kernelbench", (problems / "level1/19_ReLU.py").string(), "--out", serial,
                      "--scale", "16", "--jobs", "1"})
              .exit_code == 0);
  const auto one = lines_of(serial);
  REQUIRE(one.size() == 1);
  CHECK(one[0] == tasks[0]);
  const auto v = run_kforge({"tasks", "validate", out, "--time-limit-s", "300"});
  INFO(v.output);
  CHECK(v.exit_code == 0);
  CHECK(v.output.find("5 ok, 0 failed") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("problem files that cannot be imported are listed with the reason") {
  if (!ready()) return;
  const fs::path dir = fs::temp_directory_path() / ("kforge-kb-bad-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "level1");
  std::ofstream(dir / "level1/0_kills_its_process.py") << "import os\nos._exit(3)\n";
  std::ofstream(dir / "level1/1_syntax.py") << "import torch\nclass Model(torch.nn.Module:\n";
  std::ofstream(dir / "level1/2_no_inputs.py")
      << "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
         "def get_init_inputs():\n    return []\n";
  std::ofstream(dir / "level1/3_returns_int.py")
      << "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x, 3\n"
         "def get_inputs():\n    return [torch.randn(4, 4)]\ndef get_init_inputs():\n    return []\n";
  std::ofstream(dir / "level1/4_drawn_number.py")
      << "import random, torch\nclass Model(torch.nn.Module):\n    def forward(self, x, s: float):\n"
         "        return x * s\ndef get_inputs():\n    return [torch.randn(4, 4), random.random()]\n"
         "def get_init_inputs():\n    return []\n";
  const auto failures = dir / "failures.jsonl";
  const auto r = run_kforge({"tasks", "import-kernelbench", (dir / "level1").string(), "--out", (dir / "kb.jsonl").string(),
                         "--failures", failures.string(), "--jobs", "2"});
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(r.output.find("imported 0 of 5") != std::string::npos);
  const auto listed = lines_of(failures);
  REQUIRE(listed.size() == 5);
  // A problem that kills its worker process fails alone; the problems after it are still converted.
  CHECK(listed[0].at("reason").get<std::string>().find("worker process died") != std::string::npos);
  CHECK(listed[1].at("reason").get<std::string>().find("SyntaxError") != std::string::npos);
  CHECK(listed[2].at("reason").get<std::string>().find("no get_inputs") != std::string::npos);
  CHECK(listed[3].at("reason").get<std::string>().find("tracing the forward failed") != std::string::npos);
  CHECK(listed[4].at("reason").get<std::string>().find("float that changes between calls") != std::string::npos);
  fs::remove_all(dir);
}

// Prompts: a rendered task carries its shapes, dtypes, ABI, rules and GPU; a template with an
// unknown placeholder is an error naming it; the kernel comes back out of a completion.
#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <string>

#include "common/hash.hpp"
#include "task_builders.hpp"
#include "tasks/prompt.hpp"

using namespace kforge::tasks;
using kforge::tasks::testing::parse_or_fail;
using kforge::tasks::testing::two_input_task;

namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

hardware_context h200() {
  hardware_context hw;
  hw.name = "NVIDIA H200";
  hw.major = 9;
  hw.minor = 0;
  hw.sm_count = 132;
  hw.shared_per_block = 49152;
  hw.shared_per_block_optin = 232448;
  hw.shared_per_sm = 233472;
  hw.registers_per_sm = 65536;
  hw.l2_bytes = 62914560;
  hw.memory_bytes = 150ll << 30;
  hw.memory_bandwidth_gbs = 4800;
  return hw;
}

task add_task() {
  return parse_or_fail(two_input_task("t/add", "Add two matrices.",
                                      "def forward(x, y):\n    return x + y\n", {4096, 2048},
                                      {17, 5}));
}

}  // namespace

TEST_CASE("a prompt shows the task, its shapes and dtypes, the ABI and its rules, and the GPU") {
  const auto p = build_prompt(add_task(), h200());
  // The task.
  CHECK(contains(p, "## Task t/add (other)"));
  CHECK(contains(p, "Add two matrices."));
  CHECK(contains(p, "def forward(x, y):\n    return x + y"));
  CHECK(contains(p, "- [0] `x`: float32 (KF_FLOAT32), shape [4096, 2048] (8388608 elements)"));
  CHECK(contains(p, "- [1] `y`: float32 (KF_FLOAT32), shape [4096, 2048]"));
  CHECK(contains(p, "filled with normal(mean 0, std 1)"));
  CHECK(contains(p, "- [0] `z`: float32 (KF_FLOAT32), shape [4096, 2048]"));
  CHECK(contains(p, "- variant 1: x [17, 5], y [17, 5]"));
  CHECK(contains(p, "atol = 0.0001, rtol = 0.0001"));
  CHECK(contains(p, "No CUDA library beyond the runtime"));
  // The ABI, verbatim from the shipped header, and its rules.
  CHECK(contains(p, std::string(kernel_abi_header()).substr(0, 200)));
  CHECK(contains(p, "int kf_forward(const kf_tensor* inputs, int32_t num_inputs"));
  CHECK(contains(p, "#include <kforge/kernel_abi.h>"));
  CHECK(contains(p, "extern \"C\" int kf_forward"));
  CHECK(contains(p, "Launch all work on the given `stream`"));
  CHECK(contains(p, "Do not create or destroy streams, events"));
  CHECK(contains(p, "No host system calls"));
  CHECK(contains(p, "(x, y) are read-only"));
  CHECK(contains(p, "(z) are already allocated"));
  CHECK(contains(p, "kf_workspace_bytes"));
  // The GPU.
  CHECK(contains(p, "- Name: NVIDIA H200"));
  // The target the sandbox compiles for on this GPU: Hopper's `a` one (wgmma).
  CHECK(contains(p, "- Compute capability: 9.0 (compiled with nvcc -O3 -arch=sm_90a)"));
  CHECK(contains(p, "- SMs: 132"));
  CHECK(contains(p, "- Shared memory per block: 48 KiB (49152 bytes) (opt-in maximum: 227 KiB "
                    "(232448 bytes))"));
  CHECK(contains(p, "- Shared memory per SM: 228 KiB (233472 bytes)"));
  CHECK(contains(p, "- 32-bit registers per SM: 65536"));
  CHECK(contains(p, "- L2 cache: 60 MiB (62914560 bytes)"));
  CHECK(contains(p, "- Device memory: 150 GiB, peak bandwidth 4800 GB/s"));
  // Every placeholder was substituted.
  CHECK_FALSE(contains(p, "{{"));
}

TEST_CASE("missing hardware facts read 'unknown'") {
  const auto p = build_prompt(add_task(), hardware_context{});
  CHECK(contains(p, "- Name: unknown"));
  CHECK(contains(p, "- Compute capability: unknown"));
  CHECK(contains(p, "- SMs: unknown"));
  CHECK(contains(p, "- L2 cache: unknown"));
  CHECK(contains(p, "peak bandwidth unknown"));
  CHECK(contains(p, "-arch=unknown"));
}

TEST_CASE("the prompt's arch is the target the sandbox compiles for, on any GPU") {
  hardware_context a100;
  a100.name = "NVIDIA A100-SXM4-80GB";
  a100.major = 8;
  a100.minor = 0;
  CHECK(contains(build_prompt(add_task(), a100), "9.0") == false);
  CHECK(contains(build_prompt(add_task(), a100), "- Compute capability: 8.0 (compiled with nvcc -O3 -arch=sm_80)"));
  hardware_context b200 = a100;
  b200.major = 10;
  CHECK(contains(build_prompt(add_task(), b200), "-arch=sm_100a)"));
  // A target the sandbox was set to ([sandbox] arch) is stated as it is, even without the facts.
  hardware_context set;
  set.build_arch = "sm_89";
  CHECK(contains(build_prompt(add_task(), set), "- Compute capability: unknown (compiled with nvcc -O3 -arch=sm_89)"));
}

TEST_CASE("cuBLAS permission and a task without variants are rendered") {
  auto t = add_task();
  t.allow_cublas = true;
  t.variants.clear();
  const auto p = build_prompt(t, h200());
  CHECK(contains(p, "This task also allows cuBLAS"));
  CHECK(contains(p, "- (none: only the primary shapes)"));
}

TEST_CASE("every placeholder has a value, and the prompt hash is fnv1a64 of the prompt") {
  const auto values = prompt_values(add_task(), h200());
  std::set<std::string> names;
  for (const auto& [k, v] : values) names.insert(k);
  CHECK(names == std::set<std::string>(prompt_placeholders().begin(), prompt_placeholders().end()));
  const auto p = build_prompt(add_task(), h200());
  CHECK(prompt_hash(p) == kforge::fnv1a64(p));
  CHECK(prompt_hash(p) == prompt_hash(build_prompt(add_task(), h200())));
  CHECK(prompt_hash(p) != prompt_hash(build_prompt(add_task(), hardware_context{})));
}

TEST_CASE("the renderer substitutes placeholders and leaves other braces alone") {
  auto r =
      render_template("a {{x}} b {{ y }} c {{1, 2}} d {x} {{{x}}}\n", {{"x", "X"}, {"y", "{{x}}"}});
  REQUIRE(r.ok());
  // A value is not rescanned, so a reference containing "{{" stays as it is.
  CHECK(*r == "a X b {{x}} c {{1, 2}} d {x} {X}\n");
}

TEST_CASE("an unknown placeholder is an error naming it and its line") {
  auto r = render_template("ok {{x}}\nthen {{gpu_nmae}} and {{ nope }}\n", {{"x", "1"}},
                           "prompt template t.txt");
  REQUIRE_FALSE(r.ok());
  CHECK(r.message() ==
        "prompt template t.txt: unknown placeholders {{gpu_nmae}} (line 2), {{nope}} (line 2); "
        "known: x");

  auto t = prompt_template::from_text("GPU: {{gpu_nmae}}\n", "prompt template mine.txt");
  REQUIRE_FALSE(t.ok());
  CHECK(contains(t.message(),
                 "prompt template mine.txt: unknown placeholder {{gpu_nmae}} (line 1)"));
  CHECK(contains(t.message(), "known: arch, atol, category"));
}

TEST_CASE("a user's template file overrides the embedded one") {
  const std::string path = "prompt_test_template.txt";
  {
    std::ofstream out(path);
    out << "Kernel for {{task_id}} on {{ gpu_name }} ({{sm_count}} SMs):\n{{inputs}}\n";
  }
  auto t = prompt_template::load(path);
  REQUIRE_MESSAGE(t.ok(), (t.ok() ? "" : t.message()));
  CHECK(t->render(add_task(), h200()) ==
        "Kernel for t/add on NVIDIA H200 (132 SMs):\n"
        "- [0] `x`: float32 (KF_FLOAT32), shape [4096, 2048] (8388608 elements), filled with "
        "normal(mean 0, std 1)\n"
        "- [1] `y`: float32 (KF_FLOAT32), shape [4096, 2048] (8388608 elements), filled with "
        "normal(mean 0, std 1)\n");
  std::remove(path.c_str());

  auto missing = prompt_template::load("no/such/template.txt");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.message() == "prompt template no/such/template.txt: cannot open the file");
  CHECK(prompt_template::embedded().text() == std::string(default_prompt_template()));
}

TEST_CASE("the kernel source is the last cuda/cpp/bare fenced block that defines kf_forward") {
  const std::string kernel =
      "#include <kforge/kernel_abi.h>\nextern \"C\" int kf_forward() { return 0; }\n";
  SUBCASE("a single cuda block") {
    auto r = extract_kernel_source("Here it is:\n```cuda\n" + kernel + "```\nDone.\n");
    REQUIRE(r.ok());
    CHECK(*r == kernel);
  }
  SUBCASE("the last one wins; blocks without kf_forward and other languages are skipped") {
    const std::string first = "// draft\nint kf_forward_old; // kf_forward v1\n";
    auto r = extract_kernel_source("```cpp\n" + first + "```\nBetter:\n```\n" + kernel +
                                   "```\n```python\nkf_forward = None\n```\n```cuda\n"
                                   "__global__ void helper() {}\n```\n");
    REQUIRE(r.ok());
    CHECK(*r == kernel);
  }
  SUBCASE("indented and longer fences, language case and attributes") {
    auto r = extract_kernel_source("  ````CUDA {.numberLines}\n" + kernel + "```\n" + "  ````\n");
    REQUIRE(r.ok());
    CHECK(*r == kernel + "```\n");  // a shorter fence does not close a longer one
  }
  SUBCASE("cpp, c++ and cu are accepted, with a final fence at end of text") {
    for (const char* lang : {"cpp", "c++", "cu"}) {
      auto r = extract_kernel_source(std::string("```") + lang + "\n" + kernel + "```");
      REQUIRE(r.ok());
      CHECK(*r == kernel);
    }
  }
  SUBCASE("no fenced block") {
    auto r = extract_kernel_source("extern \"C\" int kf_forward() { return 0; }");
    REQUIRE_FALSE(r.ok());
    CHECK(r.message() == "completion: no fenced code block (```cuda ... ```) in the completion");
  }
  SUBCASE("blocks, none with kf_forward") {
    auto r = extract_kernel_source(
        "```cuda\n__global__ void k() {}\n```\n```python\nkf_forward\n```\n");
    REQUIRE_FALSE(r.ok());
    CHECK(r.message() == "completion: none of its 2 fenced block(s) is a ```cuda, ```cpp or ``` "
                         "block mentioning kf_forward (1 block(s) in another language mention it)");
  }
  SUBCASE("an unterminated block (cut off)") {
    auto r = extract_kernel_source("```cuda\n" + kernel);
    REQUIRE_FALSE(r.ok());
    CHECK(contains(r.message(), "never closed"));
  }
  SUBCASE("inline code with backticks is not a fence") {
    auto r = extract_kernel_source("```kf_forward``` is the entry point:\n```cuda\n" + kernel +
                                   "```\n");
    REQUIRE(r.ok());
    CHECK(*r == kernel);
  }
}

TEST_CASE("a source that opened a fence but holds no kernel is a malformed answer; bare code is not") {
  const std::string kernel =
      "#include <kforge/kernel_abi.h>\nextern \"C\" int kf_forward() { return 0; }\n";
  // What the sampler hands over when extraction fails: the whole completion.
  const auto cut = fenced_answer_problem("The reference computes relu.\n\n```cuda\n" +
                                         kernel.substr(0, kernel.size() - 5));
  REQUIRE(cut.has_value());
  CHECK(contains(*cut, "never closed"));
  const auto no_entry = fenced_answer_problem("Sketch:\n```cuda\n__global__ void k() {}\n```\n");
  REQUIRE(no_entry.has_value());
  CHECK(contains(*no_entry, "none of its 1 fenced block(s)"));
  // Bare code and prose go to the compiler, as before: no line opens a fence.
  CHECK_FALSE(fenced_answer_problem(kernel).has_value());
  CHECK_FALSE(fenced_answer_problem("// a comment quoting ``` mid-line\n" + kernel).has_value());
  CHECK_FALSE(
      fenced_answer_problem("```kf_forward``` is inline code, not a fence\n" + kernel).has_value());
  CHECK_FALSE(fenced_answer_problem("").has_value());
  // A source a kernel can be taken from is not malformed (nvcc judges what it is given).
  CHECK_FALSE(fenced_answer_problem("```cuda\n" + kernel + "```\n").has_value());
}

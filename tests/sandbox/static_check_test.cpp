// Static checks: one crafted candidate per rule must be rejected with that rule and line; names in
// comments and strings must not be; macro-hidden names are caught on nvcc's preprocessed output.
#include "sandbox/static_check.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "sandbox/library_check.hpp"
#include "sandbox/toolchain.hpp"
#include "sandbox/verdict_encoding.hpp"

using namespace kforge::sandbox;

namespace {

// A valid candidate with `host` placed at line 5 (inside kf_forward) and `top` at line 2.
// clang-format off
std::string candidate(const std::string& host, const std::string& top = "") {
  return "#include <kforge/kernel_abi.h>\n" +            // 1
         top + "\n" +                                    // 2
         "extern \"C\" int kf_forward(const kf_tensor* inputs, int32_t num_inputs,\n"  // 3
         "    kf_tensor* outputs, int32_t num_outputs, void* workspace, cudaStream_t stream) {\n"  // 4
         + host + "\n" +                                 // 5
         "  return 0;\n"                                 // 6
         "}\n";                                          // 7
}
// clang-format on

const toolchain* nvcc() {
  static const auto tc = find_toolchain();
  return tc ? &*tc : nullptr;
}

void expect_rejected(const std::string& src, rule r, int line, const check_options& opt = {}) {
  const auto v = check_source(src, opt);
  INFO("source:\n" << src << "\nreason: " << v.reason);
  REQUIRE(v.status == static_status::rejected);
  REQUIRE_FALSE(v.findings.empty());
  CHECK(v.findings.front().why == r);
  CHECK(v.findings.front().line == line);
  CHECK(v.reason.find(std::string(rule_name(r))) != std::string::npos);
  if (line > 0) CHECK(v.reason.find("line " + std::to_string(line)) != std::string::npos);
}

void expect_ok(const std::string& src, const check_options& opt = {}) {
  const auto v = check_source(src, opt);
  INFO("source:\n" << src << "\nreason: " << v.reason);
  CHECK(v.status == static_status::ok);
}

}  // namespace

TEST_CASE("the known-good candidate passes the static checks") {
  expect_ok(known_good_candidate());
}

TEST_CASE("each rule rejects its crafted candidate, naming the rule and the line") {
  struct crafted {
    const char* host;  // line 5
    const char* top;   // line 2
    rule why;
    int line;
  };
  // clang-format off
  const crafted cases[] = {
      // Includes outside the allowlist, and computed ones.
      {"", "#include <stdio.h>", rule::forbidden_include, 2},
      {"", "#include \"../../etc/passwd\"", rule::forbidden_include, 2},
      {"", "#include <cublas_v2.h>", rule::forbidden_include, 2},
      {"", "#define H <unistd.h>\n#include H", rule::forbidden_include, 3},
      // Host process, file, socket, dynamic loading, ptrace, signal, exit, sleep calls.
      {"  if (fork() == 0) return 1;", "", rule::host_system_call, 5},
      {"  execve(\"/bin/sh\", nullptr, nullptr);", "", rule::host_system_call, 5},
      {"  system(\"rm -rf /\");", "", rule::host_system_call, 5},
      {"  std::system(\"ls\");", "", rule::host_system_call, 5},
      {"  auto p = &system; p(\"ls\");", "", rule::host_system_call, 5},
      {"  FILE* f = popen(\"ls\", \"r\");", "", rule::host_system_call, 5},
      {"  FILE* f = fopen(\"/etc/passwd\", \"r\");", "", rule::host_system_call, 5},
      {"  int fd = open(\"/tmp/x\", 0);", "", rule::host_system_call, 5},
      {"  int s = socket(2, 1, 0);", "", rule::host_system_call, 5},
      {"  void* h = dlopen(\"libc.so.6\", 2);", "", rule::host_system_call, 5},
      {"  ptrace(0, 0, 0, 0);", "", rule::host_system_call, 5},
      {"  signal(15, nullptr);", "", rule::host_system_call, 5},
      {"  kill(1, 9);", "", rule::host_system_call, 5},
      {"  ::exit(0);", "", rule::host_system_call, 5},
      {"  usleep(1000);", "", rule::host_system_call, 5},
      {"  syscall(60, 0);", "", rule::host_system_call, 5},
      {"  mmap(nullptr, 4096, 7, 0x22, -1, 0);", "", rule::host_system_call, 5},
      {"  std::thread t([]{});", "", rule::host_system_call, 5},
      {"  const char* h = getenv(\"HOME\");", "", rule::host_system_call, 5},
      // Streams, events, graphs.
      {"  cudaStream_t s; cudaStreamCreate(&s);", "", rule::stream_graph_event, 5},
      {"  cudaStream_t s; cudaStreamCreateWithFlags(&s, 1);", "", rule::stream_graph_event, 5},
      {"  cudaEvent_t e; cudaEventCreate(&e);", "", rule::stream_graph_event, 5},
      {"  cudaGraph_t g; cudaGraphCreate(&g, 0);", "", rule::stream_graph_event, 5},
      {"  cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal);", "", rule::stream_graph_event, 5},
      {"  cudaLaunchHostFunc(stream, nullptr, nullptr);", "", rule::stream_graph_event, 5},
      // Device-wide state.
      {"  cudaDeviceSetLimit(cudaLimitStackSize, 1 << 20);", "", rule::device_control, 5},
      {"  cudaDeviceReset();", "", rule::device_control, 5},
      {"  cudaSetDevice(1);", "", rule::device_control, 5},
      {"  cudaDeviceSynchronize();", "", rule::device_control, 5},
      {"  cudaStreamSetAttribute(stream, cudaStreamAttributeAccessPolicyWindow, nullptr);", "",
       rule::device_control, 5},
      {"  cudaIpcMemHandle_t h;", "", rule::device_control, 5},
      {"  void* p; cudaGetDriverEntryPoint(\"cuCtxCreate\", &p, 0);", "", rule::device_control, 5},
      // Host memory.
      {"  void* p; cudaMallocHost(&p, 64);", "", rule::host_memory, 5},
      {"  void* p; cudaHostAlloc(&p, 64, 0);", "", rule::host_memory, 5},
      {"  void* p; cudaMallocManaged(&p, 64);", "", rule::host_memory, 5},
      // Libraries without permission.
      {"  cublasHandle_t h; cublasCreate(&h);", "", rule::library_not_allowed, 5},
      {"  nvrtcProgram p;", "", rule::library_not_allowed, 5},
      // Inline assembly: system calls anywhere, host assembly at all.
      {"  asm volatile(\"syscall\");", "", rule::host_asm, 5},
      {"  __asm__(\"mov $60, %eax\\n\\tint $0x80\");", "", rule::host_asm, 5},
      {"  asm(\"nop\");", "", rule::host_asm, 5},
      {"", "asm(\".globl evil\");", rule::host_asm, 2},
      {"", "extern \"C\" int run(const char*) asm(\"system\");", rule::host_asm, 2},
      {"", "__host__ __device__ int lane() { int r; asm(\"mov.u32 %0, %%laneid;\" : \"=r\"(r)); return r; }",
       rule::host_asm, 2},
      // Code at load time.
      {"", "__attribute__((constructor)) static void boot() {}", rule::load_time_code, 2},
      {"", "[[gnu::constructor]] static void boot() {}", rule::load_time_code, 2},
      {"", "__attribute__((section(\".init_array\"))) void* p = nullptr;", rule::load_time_code, 2},
      {"", "__attribute__((destructor)) static void bye() {}", rule::load_time_code, 2},
      // Directives.
      {"", "#pragma GCC optimize(\"O0\")", rule::forbidden_directive, 2},
      {"", "#line 1 \"/usr/include/stdio.h\"", rule::forbidden_directive, 2},
      {"", "# 1 \"/usr/include/stdio.h\"", rule::forbidden_directive, 2},
      {"", "#include_next <cuda_runtime.h>", rule::forbidden_directive, 2},
      {"  _Pragma(\"GCC diagnostic ignored \\\"-Wall\\\"\")", "", rule::forbidden_directive, 5},
      {"", "%:pragma GCC poison x", rule::forbidden_directive, 2},
      // Obfuscation: pasted and aliased names, non-ASCII names, forged line markers.
      {"  FORK();", "#define FORK fo ## rk", rule::obfuscation, 2},
      {"  sys\\u0074em(\"ls\");", "", rule::obfuscation, 5},
      {"  ID(#) 1 \"/usr/include/stdio.h\"", "#define ID(x) x", rule::obfuscation, 5},
      {"", "#define H #", rule::obfuscation, 2},
      {"  RUN(\"ls\");", "#define RUN system", rule::host_system_call, 2},
  };
  // clang-format on
  for (const auto& c : cases) {
    CAPTURE(c.host);
    CAPTURE(c.top);
    expect_rejected(candidate(c.host, c.top), c.why, c.line);
  }
}

TEST_CASE("a line splice does not hide a name, and lines stay the author's") {
  expect_rejected(candidate("  for\\\nk();"), rule::host_system_call, 5);
  expect_rejected(candidate("  int x = 0;\n  /* two\n lines */ fork();"), rule::host_system_call,
                  7);
}

TEST_CASE("forbidden names in comments, strings and members are not rejected") {
  expect_ok(
      candidate("  // fork() system(\"ls\") dlopen cudaStreamCreate cudaDeviceReset\n"
                "  /* asm volatile(\"syscall\"); #include <stdio.h> */\n"
                "  const char* s = \"fork system popen cudaEventCreate\";\n"
                "  const char* r = R\"(dlopen(\"x\") syscall)\";\n"
                "  (void)s; (void)r;"));
  expect_ok(
      candidate("", "#ifndef __CUDACC__\n#error this needs nvcc, not fork() or system()\n#endif"));
  // Generic names are fine as variables and members; only the calls are not.
  expect_ok(
      candidate("  int read = 0, write = 1; read ^= write;\n"
                "  struct { int open; int kill; } cfg{1, 2}; cfg.open += cfg.kill;"));
  // PTX in device code, pragmas that tune loops, and allowed headers are fine.
  expect_ok(
      candidate("",
                "#include <cuda_fp16.h>\n#include <cooperative_groups.h>\n#include <cmath>\n"
                "__device__ unsigned lane() { unsigned r; asm volatile(\"mov.u32 %0, %%laneid;\" "
                ": \"=r\"(r)); return r; }\n"
                "__global__ void k(float* y) {\n#pragma unroll 4\n  for (int i = 0; i < 4; ++i) "
                "y[i] = lane();\n}"));
}

TEST_CASE("cuBLAS is allowed when the task says so") {
  check_options opt;
  opt.libraries.cublas = true;
  expect_ok(candidate("  cublasHandle_t h; (void)h;", "#include <cublas_v2.h>"), opt);
  expect_rejected(candidate("", "#include <cudnn.h>"), rule::forbidden_include, 2, opt);
}

TEST_CASE("a candidate without kf_forward is a link error") {
  const auto v = check_source("#include <kforge/kernel_abi.h>\n__global__ void k() {}\n", {});
  CHECK(v.status == static_status::link_error);
  REQUIRE_FALSE(v.findings.empty());
  CHECK(v.findings.front().why == rule::missing_entry_point);
  // A declaration alone is not a definition.
  const auto d = check_source(
      "#include <kforge/kernel_abi.h>\nextern \"C\" int kf_forward(const kf_tensor*, int32_t, "
      "kf_tensor*, int32_t, void*, cudaStream_t);\n",
      {});
  CHECK(d.status == static_status::link_error);
}

TEST_CASE("only the candidate's own lines of preprocessed output are checked") {
  // What nvcc -E writes: headers (here full of forbidden names) and the candidate behind markers.
  const std::string pp =
      "# 0 \"/s/candidate.cu\"\n"
      "# 1 \"/usr/include/stdlib.h\" 1 3 4\n"
      "extern int system(const char*);\n"
      "extern int fork(void);\n"
      "# 1 \"/s/candidate.cu\" 2\n"
      "\n"
      "__attribute__((global)) void k(float* y) { asm(\"mov.u32 %0, 1;\" : \"=r\"(*(int*)y)); }\n"
      "extern \"C\" int kf_forward(const kf_tensor* i, int32_t n, kf_tensor* o, int32_t m,\n"
      "  void* w, cudaStream_t s) {\n"
      "# 9 \"/s/candidate.cu\"\n"
      "  system(\"ls\");\n"
      "  return 0; }\n";
  const auto v = check_preprocessed(pp, "/s/candidate.cu", {});
  INFO(v.reason);
  REQUIRE(v.status == static_status::rejected);
  REQUIRE(v.findings.size() == 1);
  CHECK(v.findings[0].why == rule::host_system_call);
  CHECK(v.findings[0].line == 9);
  CHECK(v.findings[0].after_preprocessing);
  CHECK(v.reason.find("after macro expansion") != std::string::npos);
  // Host assembly is told apart by the attributes nvcc's headers expand __device__ into.
  const std::string host_asm =
      "# 1 \"/s/candidate.cu\"\n"
      "__attribute__((host)) __attribute__((device)) int f() { asm(\"nop\"); return 0; }\n";
  const auto h = check_preprocessed(host_asm, "/s/candidate.cu", {});
  REQUIRE(h.status == static_status::rejected);
  CHECK(h.findings[0].why == rule::host_asm);
  CHECK(h.findings[0].line == 1);
}

TEST_CASE("macros cannot hide a forbidden call from the preprocessed pass") {
  if (!nvcc()) FAIL("no CUDA toolchain for the preprocessing pass");
  check_options opt;
  opt.preprocess_with = nvcc();
  // A function-like macro assembles the name; the raw source never spells `system(`.
  expect_rejected(candidate("  CALL(sy, stem)(\"ls\");", "#define CALL(a, b) a##b"),
                  rule::host_system_call, 5, opt);
  // A macro passes the name along without calling it.
  expect_rejected(candidate("  APPLY(kill, 1);", "#define APPLY(f, x) f(x, 9)"),
                  rule::host_system_call, 5, opt);
  // The check sees the host compiler's view: a host-only branch is not skipped.
  expect_rejected(
      candidate("#ifdef __CUDA_ARCH__\n  (void)0;\n#else\n  CALL(sy, stem)(\"ls\");\n#endif",
                "#define CALL(a, b) a##b"),
      rule::host_system_call, 8, opt);
  // Macro-built qualifiers are understood: PTX in a device function is fine, and a __host__
  // __device__ function may keep its assembly behind __CUDA_ARCH__ (the host pass never sees it).
  expect_ok(
      candidate("",
                "#define DEV __device__ __forceinline__\n"
                "DEV unsigned lane() { unsigned r; asm(\"mov.u32 %0, %%laneid;\" : \"=r\"(r)); "
                "return r; }\n"
                "__host__ __device__ unsigned lane2() {\n#ifdef __CUDA_ARCH__\n"
                "  unsigned r; asm(\"mov.u32 %0, %%laneid;\" : \"=r\"(r)); return r;\n"
                "#else\n  return 0;\n#endif\n}"),
      opt);
  // The known-good candidate passes with preprocessing too (nothing in cuda_runtime.h counts).
  expect_ok(known_good_candidate(), opt);
}

TEST_CASE("a source that does not preprocess is a compile_error with nvcc -E's first error") {
  const auto tc = find_toolchain();
  if (!tc) {
    MESSAGE("skipped: no CUDA toolchain (" << tc.message() << ")");
    return;
  }
  check_options opt;
  opt.preprocess_with = &*tc;
  // An #error that fires only under the check's defines, and host assembly only a macro shows.
  std::ifstream f(std::string(KFORGE_TEST_DATA) + "/escapes/checker_only_error.cu");
  REQUIRE(f.good());
  std::stringstream trick;
  trick << f.rdbuf();
  const auto raw_only = check_source(trick.str(), {});
  INFO("raw pass: " << raw_only.reason);
  CHECK(raw_only.ok());  // what it exploits: the raw pass expands no macros
  auto v = check_source(trick.str(), opt);
  INFO(v.reason);
  CHECK(v.status == static_status::compile_error);
  REQUIRE(v.findings.size() == 1);
  CHECK(v.findings[0].why == rule::preprocess_error);
  CHECK(v.findings[0].line == 7);
  CHECK(v.reason.find("line 7") != std::string::npos);
  CHECK(v.reason.find("only the static check sees this") != std::string::npos);
  kforge::wire::VerdictT wire;
  encode_static(v, wire);
  CHECK(wire.status == kforge::wire::VerdictStatus::compile_error);
  REQUIRE(wire.diagnostics.size() == 1);
  CHECK(wire.diagnostics[0]->code == "preprocess_error");
  CHECK(wire.diagnostics[0]->line == 7);

  // An honest preprocessor mistake reads the same way, with the line and what is wrong.
  v = check_source(candidate("", "#if KF_TILE > 8"), opt);
  INFO(v.reason);
  CHECK(v.status == static_status::compile_error);
  CHECK(v.reason.find("line 2") != std::string::npos);
  CHECK(v.reason.find("unterminated #if") != std::string::npos);
  // A C++ syntax error preprocesses: the static check passes it on to the compile, which reports
  // it (compiler_test.cpp).
  expect_ok(candidate("  int y = x + ;"), opt);
}

TEST_CASE("a realistic kernel (CUB, cooperative groups, libcu++, fp16, PTX) passes") {
  std::ifstream f(std::string(KFORGE_TEST_DATA) + "/candidates/realistic_softmax.cu");
  REQUIRE(f.good());
  std::stringstream src;
  src << f.rdbuf();
  expect_ok(src.str());
  if (!nvcc()) FAIL("no CUDA toolchain for the preprocessing pass");
  check_options opt;
  opt.preprocess_with = nvcc();
  expect_ok(src.str(), opt);
}

// examples/kernelbench holds hand-written kernels for KernelBench problems; their task file is made
// from a KernelBench checkout (not in the repository), so only the task-free checks run here.
// Compiling them takes seconds each: examples/kernelbench/judge.sh -- --compile-only does that.
TEST_CASE("the KernelBench example kernels pass the static checks") {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(KFORGE_TEST_DATA) / ".." / ".." / "examples" / "kernelbench";
  REQUIRE(fs::is_directory(root));
  check_options preprocessed;
  preprocessed.preprocess_with = nvcc();
  if (!nvcc()) MESSAGE("no CUDA toolchain: the examples are checked without nvcc -E");
  int kernels = 0;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    if (!e.is_regular_file() || e.path().extension() != ".cu") continue;
    ++kernels;
    std::ifstream f(e.path());
    std::stringstream src;
    src << f.rdbuf();
    INFO(e.path().string());
    expect_ok(src.str());
    if (nvcc()) expect_ok(src.str(), preprocessed);
  }
  CHECK(kernels >= 10);
}

TEST_CASE("the library check reads exports, imports and load-time code") {
  elf_summary good;
  good.exported_functions = {"kf_forward", "_Z11relu_kernelPKfPfl"};
  good.imported = {"cudaGetLastError@libcudart.so.13", "__cxa_atexit@GLIBC_2.2.5", "sqrt"};
  good.init_functions = {"frame_dummy", "_ZL24__sti____cudaRegisterAllv"};
  good.fini_functions = {"__do_global_dtors_aux"};
  CHECK(check_library(good, {}).status == static_status::ok);

  auto with = [&](auto change) {
    elf_summary e = good;
    change(e);
    return check_library(e, {});
  };
  auto v = with([](elf_summary& e) { e.imported.push_back("system@GLIBC_2.2.5"); });
  CHECK(v.status == static_status::rejected);
  CHECK(v.reason.find("`system`") != std::string::npos);
  CHECK(with([](elf_summary& e) { e.imported.push_back("write"); }).status ==
        static_status::rejected);
  // nvcc's host stub of every external __device__ function calls exit: not the candidate's call.
  CHECK(with([](elf_summary& e) { e.imported.push_back("exit@GLIBC_2.2.5"); }).status ==
        static_status::ok);
  CHECK(with([](elf_summary& e) { e.imported.push_back("cudaStreamCreate"); }).findings[0].why ==
        rule::stream_graph_event);
  CHECK(with([](elf_summary& e) {
          e.imported.push_back("_ZNSt10filesystem6removeERKNS_7__cxx114pathE");
        }).status == static_status::rejected);
  v = with([](elf_summary& e) { e.init_functions.push_back("_GLOBAL__sub_I_candidate.cu"); });
  CHECK(v.status == static_status::rejected);
  CHECK(v.findings[0].why == rule::load_time_code);
  CHECK(v.reason.find("static initialiser") != std::string::npos);
  CHECK(with([](elf_summary& e) { e.fini_functions.push_back("_ZL3byev"); }).status ==
        static_status::rejected);
  v = with([](elf_summary& e) { e.exported_functions = {"_Z10kf_forwardi"}; });
  CHECK(v.status == static_status::link_error);
}

// Compiling candidates with the real nvcc (no GPU needed): status, diagnostics, resource usage,
// limits, library checks, the cache, and the targets of GPUs other than Hopper. Few real compiles
// (each takes seconds on CI); the parsers are tested on strings in diagnostics_test.cpp.
#include "sandbox/compiler.hpp"

#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "sandbox/compile_cache.hpp"
#include "common/gpu_arch.hpp"
#include "common/subprocess.hpp"
#include "sandbox/pool.hpp"
#include "sandbox/verdict_encoding.hpp"

using namespace kforge::sandbox;
namespace fs = std::filesystem;

namespace {

const toolchain& nvcc() {
  static const auto tc = find_toolchain();
  if (!tc) FAIL("no CUDA toolchain: " << tc.message());
  return *tc;
}

// A fresh directory for one test case, removed at the end.
struct temp_dir {
  fs::path path;
  explicit temp_dir(const std::string& name)
      : path(fs::temp_directory_path() / ("kforge-" + name + "-" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::size_t entries() const {
    return static_cast<std::size_t>(
        std::distance(fs::directory_iterator(path), fs::directory_iterator()));
  }
};

constexpr const char* syntax_error =
    "#include <kforge/kernel_abi.h>\n"
    "__global__ void k(float* y) {\n"
    "  int unused = 3;\n"
    "  y[0] = x;\n"
    "}\n"
    "extern \"C\" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,\n"
    "                          int32_t num_outputs, void* workspace, cudaStream_t stream) {\n"
    "  return 0;\n"
    "}\n";

}  // namespace

TEST_CASE("the known-good candidate compiles, reports its kernel's resources, and is cached") {
  temp_dir cache("compile-cache");
  compile_options opt;
  opt.cache_dir = cache.path.string();
  const auto first = compile(nvcc(), known_good_candidate(), opt);
  INFO(first.reason << "\n" << first.log);
  REQUIRE(first.status == compile_status::ok);
  CHECK_FALSE(first.cache_hit);
  CHECK(fs::exists(first.library));
  CHECK(first.library.rfind(cache.path.string(), 0) == 0);
  REQUIRE(first.resources.size() == 1);
  CHECK(first.resources[0].kernel.find("relu_kernel") == 0);
  CHECK(first.resources[0].registers > 0);
  CHECK(first.nvcc_ms > 0);
  for (const auto& d : first.diagnostics) CHECK(d.level != severity::error);

  // The same source again: a hit, fast, with the same result and library.
  const auto second = compile(nvcc(), known_good_candidate(), opt);
  CHECK(second.cache_hit);
  CHECK(second.status == compile_status::ok);
  CHECK(second.library == first.library);
  CHECK(second.cache_key == first.cache_key);
  CHECK(second.nvcc_ms == doctest::Approx(first.nvcc_ms));
  CHECK(second.elapsed_ms < 200);
  CHECK(second.elapsed_ms < first.elapsed_ms / 5);
  REQUIRE(second.resources.size() == 1);
  CHECK(second.resources[0].registers == first.resources[0].registers);
  CHECK(cache.entries() == 1);  // no staging directory left behind

  // Anything that changes the build changes the key.
  compile_options other = opt;
  other.arch = "sm_80";
  CHECK(compile_key(nvcc(), known_good_candidate(), other) != first.cache_key);
  other = opt;
  other.libraries.cublas = true;
  CHECK(compile_key(nvcc(), known_good_candidate(), other) != first.cache_key);
  CHECK(compile_key(nvcc(), std::string(known_good_candidate()) + " ", opt) != first.cache_key);

  // As a verdict.
  kforge::wire::VerdictT v;
  encode_compile(first, v);
  CHECK(v.status == kforge::wire::VerdictStatus::ok);
  REQUIRE(v.resources.size() == 1);
  CHECK(v.resources[0]->registers == first.resources[0].registers);
  CHECK(v.compile_ms == doctest::Approx(first.elapsed_ms));
}

TEST_CASE("a syntax error is a compile_error with the line and nvcc's message") {
  compile_options opt;  // no cache: the library (none here) would live in a private directory
  const auto r = compile(nvcc(), syntax_error, opt);
  INFO(r.log);
  REQUIRE(r.status == compile_status::compile_error);
  CHECK(r.reason == "line 4: identifier \"x\" is undefined");
  REQUIRE_FALSE(r.diagnostics.empty());
  CHECK(r.diagnostics[0].line == 4);
  CHECK(r.diagnostics[0].column == 10);
  CHECK(r.library.empty());

  kforge::wire::VerdictT v;
  encode_compile(r, v);
  CHECK(v.status == kforge::wire::VerdictStatus::compile_error);
  CHECK(v.reason == r.reason);
  REQUIRE_FALSE(v.diagnostics.empty());
  CHECK(v.diagnostics[0]->line == 4);
  CHECK(v.diagnostics[0]->message == "identifier \"x\" is undefined");
}

TEST_CASE("concurrent compiles of one source share one cache entry; a broken entry is rebuilt") {
  temp_dir cache("compile-race");
  compile_options opt;
  opt.cache_dir = cache.path.string();
  compile_result a, b;
  std::thread ta([&] { a = compile(nvcc(), syntax_error, opt); });
  std::thread tb([&] { b = compile(nvcc(), syntax_error, opt); });
  ta.join();
  tb.join();
  CHECK(a.status == compile_status::compile_error);
  CHECK(b.status == compile_status::compile_error);
  CHECK(a.reason == b.reason);
  CHECK(cache.entries() == 1);
  CHECK(compile(nvcc(), syntax_error, opt).cache_hit);

  fs::remove(cache.path / a.cache_key / "result.json");
  const auto rebuilt = compile(nvcc(), syntax_error, opt);
  CHECK_FALSE(rebuilt.cache_hit);
  CHECK(rebuilt.reason == a.reason);
  CHECK(compile(nvcc(), syntax_error, opt).cache_hit);
  CHECK(cache.entries() == 1);
}

TEST_CASE("a cache hit checks its stored library again: a swapped-in library is rejected") {
  temp_dir cache("compile-tamper");
  compile_options opt;
  opt.cache_dir = cache.path.string();
  const auto first = compile(nvcc(), known_good_candidate(), opt);
  INFO(first.reason << "\n" << first.log);
  REQUIRE(first.status == compile_status::ok);

  // A library that imports system(), built with the sandbox's own flags but past its checks,
  // replaces the entry's library; the entry's source and result.json stay as they were.
  temp_dir evil("compile-tamper-build");
  const std::string src = (evil.path / "evil.cu").string();
  const std::string lib = (evil.path / "evil.so").string();
  {
    std::ofstream f(src);
    f << "#include <kforge/kernel_abi.h>\n"
         "extern \"C\" int system(const char*);\n"
         "extern \"C\" int kf_forward(const kf_tensor* i, int32_t n, kf_tensor* o, int32_t m,"
         " void* w, cudaStream_t s) { return system(\"id\"); }\n";
  }
  const auto built = kforge::run_process(candidate_command(nvcc(), src, lib, opt),
                                         std::chrono::seconds(120));
  REQUIRE(built.ok());
  INFO(built->output);
  REQUIRE(built->exit_code == 0);
  fs::copy_file(lib, first.library, fs::copy_options::overwrite_existing);

  const auto hit = compile(nvcc(), known_good_candidate(), opt);
  CHECK(hit.cache_hit);
  CHECK(hit.status == compile_status::rejected);
  CHECK(hit.reason.find("`system`") != std::string::npos);
  CHECK(hit.library.empty());  // nothing for a runner to load
}

TEST_CASE("no exported kf_forward, or an undefined call, is a link_error") {
  // A different signature overloads the ABI's declaration with C++ linkage: nothing is exported
  // under the name kf_forward.
  const auto wrong = compile(nvcc(),
                             "#include <kforge/kernel_abi.h>\n"
                             "int kf_forward(const kf_tensor* inputs, int32_t n) { return n; }\n",
                             {});
  INFO(wrong.log);
  CHECK(wrong.status == compile_status::link_error);
  CHECK(wrong.reason.find("kf_forward") != std::string::npos);

  const auto undefined = compile(nvcc(),
                                 "#include <kforge/kernel_abi.h>\n"
                                 "extern \"C\" int helper_missing(int);\n"
                                 "extern \"C\" int kf_forward(const kf_tensor* i, int32_t n, "
                                 "kf_tensor* o, int32_t m, void* w, cudaStream_t s) {\n"
                                 "  return helper_missing(n);\n}\n",
                                 {});
  INFO(undefined.log);
  CHECK(undefined.status == compile_status::link_error);
  CHECK(undefined.reason == "ld: undefined reference to `helper_missing'");
}

TEST_CASE("code that runs at load time is rejected from the built library") {
  const auto r = compile(nvcc(),
                         "#include <kforge/kernel_abi.h>\n"
                         "static volatile int base = 1;\n"
                         "static int calls = base + 1;  // reading a volatile: run at load time\n"
                         "extern \"C\" int kf_forward(const kf_tensor* i, int32_t n, kf_tensor* o,"
                         " int32_t m, void* w, cudaStream_t s) { return calls - 1; }\n",
                         {});
  INFO(r.log);
  CHECK(r.status == compile_status::rejected);
  CHECK(r.reason.find("load_time_code") != std::string::npos);
  CHECK(r.reason.find("static initialiser") != std::string::npos);
  CHECK(r.library.empty());
}

TEST_CASE("a compile past the time limit is killed cleanly") {
  temp_dir scratch("compile-slow");
  compile_options opt;
  opt.scratch_root = scratch.path.string();
  opt.time_limit = std::chrono::milliseconds(1500);
  // A fully unrolled 96x96 register-array loop: ptxas spends well over 10 s on it.
  const char* slow =
      "#include <kforge/kernel_abi.h>\n"
      "__global__ void __launch_bounds__(1024, 2) big(float* y, int n) {\n"
      "  float r[96];\n"
      "#pragma unroll\n"
      "  for (int i = 0; i < 96; ++i) r[i] = y[i * n + threadIdx.x];\n"
      "  float s = 0;\n"
      "#pragma unroll\n"
      "  for (int i = 0; i < 96; ++i)\n"
      "#pragma unroll\n"
      "    for (int j = 0; j < 96; ++j) s += r[i] * r[(i * j + n) % 96];\n"
      "  y[threadIdx.x] = s;\n"
      "}\n"
      "extern \"C\" int kf_forward(const kf_tensor* i, int32_t n, kf_tensor* o, int32_t m,"
      " void* w, cudaStream_t s) { big<<<1, 1, 0, s>>>(nullptr, 3); return 0; }\n";
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = compile(nvcc(), slow, opt);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(r.log);
  CHECK(r.status == compile_status::timeout);
  CHECK(r.reason.find("time limit of 1.5 s") != std::string::npos);
  CHECK(s < 5);
  CHECK(scratch.entries() == 0);  // the private build directory is gone, temporaries and all
  CHECK_FALSE(compile_cache::cacheable(r));
}

TEST_CASE("a compile past the memory cap fails cleanly") {
  compile_options opt;
  opt.memory_limit_bytes = 512ull << 20;
  // The preprocessor reads /dev/zero until memory runs out (the static check rejects this include;
  // here the compiler's own cap must hold).
  const auto r = compile(nvcc(), "#include \"/dev/zero\"\n", opt);
  INFO(r.log);
  CHECK(r.status == compile_status::compile_error);
  CHECK(r.reason.find("ran out of memory") != std::string::npos);
  CHECK_FALSE(compile_cache::cacheable(r));
}

TEST_CASE("only compile errors pinned on a source line are cached") {
  compile_result r;
  r.status = compile_status::compile_error;
  r.reason = "nvcc failed";
  // nvcc could not write its output: the machine's fault, not the source's.
  r.diagnostics.push_back({0, 0, severity::error, "nvcc", "Could not open output file 'x.o'"});
  CHECK_FALSE(compile_cache::cacheable(r));
  r.diagnostics.push_back({4, 7, severity::warning, "177-D", "variable declared but never used"});
  CHECK_FALSE(compile_cache::cacheable(r));
  r.diagnostics.push_back({5, 3, severity::error, "20", "identifier \"y\" is undefined"});
  CHECK(compile_cache::cacheable(r));
}

TEST_CASE("cache entries round-trip through result.json") {
  compile_result r;
  r.status = compile_status::compile_error;
  r.reason = "line 4: x";
  r.diagnostics = {{4, 10, severity::error, "", "x"}, {0, 0, severity::warning, "ptxas", "w"}};
  r.resources = {{"k(float*)", 32, 1024, 8, 16, 64}};
  r.log = "bad bytes: \xff\xfe";
  r.nvcc_ms = 1234.5;
  const auto back = compile_result_from_json(to_json(r));
  REQUIRE(back.ok());
  CHECK(back->status == r.status);
  CHECK(back->reason == r.reason);
  REQUIRE(back->diagnostics.size() == 2);
  CHECK(back->diagnostics[0].column == 10);
  CHECK(back->diagnostics[1].level == severity::warning);
  CHECK(back->diagnostics[1].code == "ptxas");
  REQUIRE(back->resources.size() == 1);
  CHECK(back->resources[0].spill_load_bytes == 16);
  CHECK(back->resources[0].stack_bytes == 64);
  CHECK(back->nvcc_ms == doctest::Approx(1234.5));
  CHECK(back->library.empty());
  CHECK_FALSE(compile_result_from_json("{\"status\": \"ok\"}").ok());
  CHECK_FALSE(compile_result_from_json("not json").ok());
}

TEST_CASE(
    "static verdicts encode as rejected / link_error verdicts with one diagnostic a finding") {
  static_verdict s;
  s.status = static_status::rejected;
  s.findings = {{rule::host_system_call, 7, "`fork`", false}};
  s.reason = "rejected by " + describe(s.findings[0]);
  kforge::wire::VerdictT v;
  encode_static(s, v);
  CHECK(v.status == kforge::wire::VerdictStatus::rejected);
  CHECK(v.reason == s.reason);
  REQUIRE(v.diagnostics.size() == 1);
  CHECK(v.diagnostics[0]->line == 7);
  CHECK(v.diagnostics[0]->code == "host_system_call");
  CHECK(to_wire(static_status::link_error) == kforge::wire::VerdictStatus::link_error);
  CHECK(to_wire(compile_status::timeout) == kforge::wire::VerdictStatus::timeout);
}

TEST_CASE("run_limited applies rlimits, environment and kills the whole group at the deadline") {
  kforge::process_limits lim;
  lim.address_space_bytes = 256ull << 20;
  lim.env = {{"KFORGE_PROBE", "yes"}};
  lim.time = std::chrono::seconds(10);
  auto r = kforge::run_limited({"sh", "-c", "ulimit -v; ulimit -c; echo $KFORGE_PROBE"}, lim);
  REQUIRE(r.ok());
  CHECK(r->exit_code == 0);
  CHECK(r->output == "262144\n0\nyes\n");

  lim.time = std::chrono::milliseconds(300);
  const auto t0 = std::chrono::steady_clock::now();
  r = kforge::run_limited({"sh", "-c", "sleep 30 & sleep 30; wait"}, lim);
  REQUIRE(r.ok());
  CHECK(r->timed_out);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));

  r = kforge::run_limited({"/nonexistent/kforge-tool"}, lim);
  REQUIRE(r.ok());
  CHECK(r->exit_code == 127);
}

// ---- targets other than Hopper's -----------------------------------------------------------

namespace {

// The toolchain, or why an arch test is skipped (shown, not silent).
const toolchain* nvcc_or_skip() {
  static const auto tc = find_toolchain();
  if (!tc) MESSAGE("skipped: no CUDA toolchain (" << tc.message() << ")");
  return tc ? &*tc : nullptr;
}

kforge::gpu_facts gpu(const std::string& name, int major, int minor) {
  kforge::gpu_facts f;
  f.name = name;
  f.major = major;
  f.minor = minor;
  return f;
}

}  // namespace

TEST_CASE("arch: the known-good candidate compiles for sm_80 (A100) and sm_89 (L40S), a cache entry each") {
  const toolchain* tc = nvcc_or_skip();
  if (!tc) return;
  temp_dir cache("compile-arch");
  std::vector<std::string> keys;
  for (const std::string arch : {"sm_80", "sm_89"}) {
    CAPTURE(arch);
    compile_options opt;
    opt.cache_dir = cache.path.string();
    opt.arch = arch;
    const auto r = compile(*tc, known_good_candidate(), opt);
    INFO(r.reason << "\n" << r.log);
    REQUIRE(r.status == compile_status::ok);
    CHECK_FALSE(r.cache_hit);
    REQUIRE(r.resources.size() == 1);
    CHECK(r.resources[0].registers > 0);
    // Machine code for that target, not Hopper's: ptxas names the target it compiled each kernel for.
    CHECK(r.log.find("for '" + arch + "'") != std::string::npos);
    CHECK(r.log.find("sm_90") == std::string::npos);
    keys.push_back(r.cache_key);
  }
  CHECK(keys[0] != keys[1]);
  CHECK(cache.entries() == 2);
}

TEST_CASE("arch: a GPU's compute capability names its nvcc target") {
  using kforge::arch_for_compute_capability;
  CHECK(arch_for_compute_capability(8, 0) == "sm_80");    // A100
  CHECK(arch_for_compute_capability(8, 6) == "sm_86");    // A10, RTX 30
  CHECK(arch_for_compute_capability(8, 9) == "sm_89");    // L40S, RTX 40
  CHECK(arch_for_compute_capability(9, 0) == "sm_90a");   // H100/H200: wgmma needs the `a`
  CHECK(arch_for_compute_capability(10, 0) == "sm_100a"); // B200: tcgen05 needs the `a`
  CHECK(arch_for_compute_capability(10, 3) == "sm_103a"); // B300
  CHECK(arch_for_compute_capability(12, 0) == "sm_120");  // RTX 50, RTX PRO 6000
  CHECK(arch_for_compute_capability(0, 0).empty());       // unknown
  // What the prompts state: the derived target, or the one the sandbox was set to.
  auto h200 = gpu("NVIDIA H200", 9, 0);
  CHECK(h200.arch() == "sm_90a");
  h200.build_arch = "sm_90";
  CHECK(h200.arch() == "sm_90");
}

TEST_CASE("arch: every target the compute capabilities of current GPUs give is one nvcc builds") {
  const toolchain* tc = nvcc_or_skip();
  if (!tc) return;
  auto listed = kforge::run_process({tc->nvcc, "--list-gpu-code"}, std::chrono::seconds(30));
  REQUIRE(listed.ok());
  INFO(listed->output);
  const std::vector<std::pair<int, int>> current = {{8, 0}, {8, 6}, {8, 9}, {9, 0}, {10, 0}, {12, 0}};
  for (const auto& [major, minor] : current) {
    std::string arch = kforge::arch_for_compute_capability(major, minor);
    CAPTURE(arch);
    CHECK(valid_arch(arch));
    // nvcc lists the family targets; an `a` target exists where its family's does.
    if (arch.back() == 'a') arch.pop_back();
    CHECK(listed->output.find(arch + "\n") != std::string::npos);
  }
}

TEST_CASE("arch: auto is the first GPU's target, sm_90a with no GPU; a set one stays; a bad one fails") {
  auto a100 = resolve_arch("auto", gpu("NVIDIA A100-SXM4-80GB", 8, 0));
  REQUIRE(a100.ok());
  CHECK(a100->arch == "sm_80");
  CHECK(a100->automatic);
  CHECK(a100->how == "auto: NVIDIA A100-SXM4-80GB's compute capability 8.0");
  auto b200 = resolve_arch("auto", gpu("NVIDIA B200", 10, 0));
  REQUIRE(b200.ok());
  CHECK(b200->arch == "sm_100a");

  auto none = resolve_arch("auto", std::nullopt);
  REQUIRE(none.ok());
  CHECK(none->arch == "sm_90a");
  CHECK(none->how.find("no GPU to ask") != std::string::npos);

  // A set target wins over the GPU's.
  auto set = resolve_arch("sm_89", gpu("NVIDIA H100", 9, 0));
  REQUIRE(set.ok());
  CHECK(set->arch == "sm_89");
  CHECK_FALSE(set->automatic);

  auto bad = resolve_arch("native", std::nullopt);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.message().find("'native'") != std::string::npos);
  auto unknown = resolve_arch("auto", gpu("mystery", 0, 0));
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.message().find("no compute capability") != std::string::npos);
}

TEST_CASE("arch: a compile-only pool under auto compiles for sm_90a and its banner says so") {
  if (!nvcc_or_skip()) return;
  pool_options po;
  po.eval.compile.arch = "auto";
  po.compile_only = true;
  auto pool = sandbox_pool::create(po);
  REQUIRE_MESSAGE(pool.ok(), pool.message());
  CHECK((*pool)->arch().arch == "sm_90a");
  CHECK((*pool)->eval().options().compile.arch == "sm_90a");
  CHECK((*pool)->describe().find("for sm_90a (auto with no GPU to ask") != std::string::npos);

  po.eval.compile.arch = "sm_80";
  pool = sandbox_pool::create(po);
  REQUIRE_MESSAGE(pool.ok(), pool.message());
  CHECK((*pool)->eval().options().compile.arch == "sm_80");
  CHECK((*pool)->describe().find("for sm_80 (set)") != std::string::npos);

  po.eval.compile.arch = "sm_90a -G";
  pool = sandbox_pool::create(po);
  REQUIRE_FALSE(pool.ok());
  CHECK(pool.message().find("'sm_90a -G'") != std::string::npos);
}

TEST_CASE("with the library check off (the confinement test's mode) a forbidden import builds ok") {
  const std::string calls_system =
      "#include <kforge/kernel_abi.h>\n"
      "extern \"C\" int system(const char*);\n"
      "extern \"C\" int kf_forward(const kf_tensor* i, int32_t n, kf_tensor* o,"
      " int32_t m, void* w, cudaStream_t s) { return system(\"true\"); }\n";
  compile_options checked;
  const auto r = compile(nvcc(), calls_system, checked);
  CHECK(r.status == compile_status::rejected);
  compile_options unchecked;
  unchecked.check_library = false;
  const auto u = compile(nvcc(), calls_system, unchecked);
  INFO(u.reason << "\n" << u.log);
  CHECK(u.status == compile_status::ok);
  CHECK_FALSE(u.library.empty());
  CHECK(compile_key(nvcc(), calls_system, unchecked) != compile_key(nvcc(), calls_system, checked));
}

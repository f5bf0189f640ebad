// The built library's imports against the allowlist (static_rules.hpp import_allowed): every
// library an honest suite candidate builds passes; the escapes in escapes/ (host calls the deny
// lists once missed) are each rejected by the source check at their line and, built anyway, by
// the library check, which names the import; a name no deny list has is refused by the allowlist.
#include "sandbox/library_check.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/parallel.hpp"
#include "sandbox/compiler.hpp"
#include "sandbox/toolchain.hpp"
#include "suite_manifest.hpp"

using namespace kforge::sandbox;
using namespace kforge::sandbox::testing;

namespace {

const std::string escapes_dir = std::string(KFORGE_TEST_DATA) + "/escapes";

// An escape candidate, the imports its library must be rejected for, and whether a deny list
// names them (the source check then rejects the source too, with host_system_call).
struct escape {
  const char* file;
  std::vector<std::string> imports;
  bool denied_by_name = true;
};

const std::vector<escape>& escapes() {
  static const std::vector<escape> all = {
      {"wordexp.cu", {"wordexp"}},
      {"sigqueue.cu", {"sigqueue"}},
      {"pidfd_send_signal.cu", {"pidfd_open", "pidfd_send_signal"}},
      {"thrd_create.cu", {"thrd_create"}},
      {"_Fork.cu", {"_Fork", "setpgid"}},
      {"openat64.cu", {"openat64"}},
      {"preadv.cu", {"preadv"}},
      {"pwritev.cu", {"pwritev"}},
      {"dl_iterate_phdr.cu", {"dl_iterate_phdr"}},
      {"posix_openpt.cu", {"posix_openpt"}, false},
  };
  return all;
}

// The toolchain, or why the test is skipped (shown, not silent).
const toolchain* nvcc() {
  static const auto tc = find_toolchain();
  if (!tc) MESSAGE("skipped: no CUDA toolchain (" << tc.message() << ")");
  return tc ? &*tc : nullptr;
}

// What the honest candidates' libraries import besides the CUDA runtime (nm -D --undefined-only).
elf_summary honest_library() {
  elf_summary e;
  e.exported_functions = {"kf_forward"};
  e.imported = {"cudaGetLastError",       "__cudaRegisterFatBinary", "__cudaLaunchKernel",
                "__cxa_atexit",           "__cxa_finalize",          "__gmon_start__",
                "_ITM_registerTMCloneTable", "__cxa_guard_acquire",   "__gxx_personality_v0",
                "_Unwind_Resume",         "exit",                    "memmove",
                "sqrtf",                  "log2",                    "_Znam",
                "_ZdlPvm",                "__assert_fail",           "time",
                "_ZSt24__throw_out_of_range_fmtPKcz", "_ZTIi",
                "_ZTVN10__cxxabiv120__si_class_type_infoE"};
  e.weak_imported = {"__cxa_finalize", "__gmon_start__", "_ITM_registerTMCloneTable"};
  e.init_functions = {"frame_dummy"};
  return e;
}

static_verdict with_import(const std::string& name, bool weak = false,
                           const library_permissions& perms = {}) {
  elf_summary e = honest_library();
  e.imported.push_back(name);
  if (weak) e.weak_imported.push_back(name);
  return check_library(e, perms);
}

}  // namespace

TEST_CASE("the import allowlist: the CUDA runtime, cuBLAS where allowed, C/C++ runtime support") {
  CHECK(check_library(honest_library(), {}).status == static_status::ok);
  CHECK(with_import("cudaMemcpyAsync@libcudart.so.13").ok());
  CHECK(with_import("expf@GLIBC_2.27").ok());
  CHECK(with_import("fmaxl").ok());

  // A name no deny list has is refused, with the symbol and the rule.
  auto v = with_import("posix_openpt@GLIBC_2.2.5");
  CHECK(v.status == static_status::rejected);
  REQUIRE_FALSE(v.findings.empty());
  CHECK(v.findings[0].why == rule::import_not_allowed);
  CHECK(v.reason.find("`posix_openpt`") != std::string::npos);
  CHECK(v.reason.find("import_not_allowed") != std::string::npos);
  for (const char* other : {"getpwnam", "fprintf", "stdout", "_ZNSt6chrono3_V212system_clock3nowEv",
                            "__tls_get_addr", "cuModuleLoad", "nvrtcCompileProgram"})
    CHECK_MESSAGE(!with_import(other).ok(), other);
  // A name a deny list has keeps the deny list's rule, the better reason.
  v = with_import("wordexp");
  REQUIRE_FALSE(v.findings.empty());
  CHECK(v.findings[0].why == rule::host_system_call);
  CHECK(with_import("__cudaRegisterManagedVar").findings.at(0).why == rule::host_memory);
  // ... also when an unlisted import comes first in the library's symbol table.
  elf_summary both = honest_library();
  both.imported.insert(both.imported.begin(), {"posix_openpt", "sigqueue"});
  v = check_library(both, {});
  REQUIRE(v.findings.size() == 2);
  CHECK(v.findings[0].why == rule::host_system_call);
  CHECK(v.reason.find("`sigqueue`") != std::string::npos);

  // cuBLAS only when the task allows it.
  library_permissions cublas;
  cublas.cublas = true;
  CHECK(with_import("cublasSgemm_v2", false, cublas).ok());
  CHECK(with_import("cublasLtMatmul", false, cublas).ok());
  CHECK(with_import("cublasSgemm_v2").findings.at(0).why == rule::library_not_allowed);

  // A weak import binds to whatever defines the name at load time: only crtbegin's are allowed.
  v = with_import("cudaGetLastErrorX", true);
  CHECK(v.status == static_status::rejected);
  CHECK(v.reason.find("weakly") != std::string::npos);
  CHECK_FALSE(with_import("memcpy", true).ok());
}

TEST_CASE("each escape is rejected by the source check, naming its call") {
  for (const auto& e : escapes()) {
    if (!e.denied_by_name) continue;
    CAPTURE(e.file);
    const std::string src = read_file(escapes_dir + "/" + e.file);
    REQUIRE_FALSE(src.empty());
    const auto v = check_source(src, {});
    INFO(v.reason);
    CHECK(v.status == static_status::rejected);
    REQUIRE_FALSE(v.findings.empty());
    CHECK(v.findings[0].why == rule::host_system_call);
    CHECK(v.findings[0].line > 0);
    CHECK(v.reason.find("`" + e.imports[0] + "`") != std::string::npos);
  }
}

TEST_CASE("each escape, built anyway, is rejected by the library check, naming the import") {
  if (!nvcc()) return;
  // compile() runs nvcc and the library check, not the source check.
  std::vector<compile_result> built(escapes().size());
  kforge::parallel_for(escapes().size(), 2, [&](std::size_t i) {
    built[i] = compile(*nvcc(), read_file(escapes_dir + "/" + escapes()[i].file), {});
  });
  for (std::size_t i = 0; i < escapes().size(); ++i) {
    const auto& e = escapes()[i];
    CAPTURE(e.file);
    INFO(built[i].reason << "\n" << built[i].log);
    CHECK(built[i].status == compile_status::rejected);
    CHECK(built[i].library.empty());
    for (const auto& symbol : e.imports) {
      const bool named = std::any_of(
          built[i].diagnostics.begin(), built[i].diagnostics.end(), [&](const diagnostic& d) {
            return d.message.find("`" + symbol + "`") != std::string::npos &&
                   d.code == (e.denied_by_name ? "host_system_call" : "import_not_allowed");
          });
      CHECK_MESSAGE(named, symbol);
    }
  }
}

TEST_CASE("every suite candidate that reaches the run stage builds a library the allowlist takes") {
  if (!nvcc()) return;
  // Verdicts only a run decides: the candidate must pass every check before it.
  const std::set<std::string> decided_before_run = {"rejected", "compile_error", "link_error"};
  std::vector<suite_entry> honest;
  for (auto& e : load_suite())
    if (std::none_of(e.expect.begin(), e.expect.end(),
                     [&](const std::string& v) { return decided_before_run.count(v) == 1; }))
      honest.push_back(std::move(e));
  REQUIRE(honest.size() >= 30);
  std::vector<compile_result> built(honest.size());
  const int threads = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 4u));
  kforge::parallel_for(honest.size(), threads, [&](std::size_t i) {
    built[i] = compile(*nvcc(), read_file(suite_dir + "/" + honest[i].file), {});
  });
  for (std::size_t i = 0; i < honest.size(); ++i) {
    CAPTURE(honest[i].file);
    std::string findings;
    for (const auto& d : built[i].diagnostics)
      if (d.level == severity::error) findings += d.code + ": " + d.message + "\n";
    INFO(built[i].reason << "\n" << findings);
    CHECK(built[i].status == compile_status::ok);
  }
}

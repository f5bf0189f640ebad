#pragma once
// Static checks of a candidate source before it is compiled: the `rejected` verdict with a reason
// that names the rule and the line (rules and their lists: static_rules.hpp).
//
// How it looks at the source:
// 1. The raw source is lexed (source_lexer.hpp): comments and string literals never match, names
//    match on token boundaries, lines are the author's. Directives are checked here: includes
//    against the allowlist, pragmas, #line (it would break step 2), token pasting that spells a
//    forbidden name, `#` outside directives (it could forge a line marker in step 2).
// 2. With a toolchain, the source is preprocessed with `nvcc -E` (same -arch/-I as the build, and
//    -U__CUDA_ARCH__: plain `nvcc -E` gives the device pass, while host calls live in the host
//    pass) and the candidate's own lines of the output — found through the line markers, so the
//    thousands of lines of cuda_runtime.h are not checked — are lexed and checked again: a macro,
//    an alias or a pasted name cannot hide a forbidden call there. Reasons say "after macro
//    expansion".
// 3. Inline assembly: its text must not make system calls (syscall, sysenter, int 0x80, svc), and
// it
//    may only appear inside a function marked __device__ or __global__ (not __host__ __device__):
//    PTX in device code is fine, host assembly is not. The context is the chain of braces and the
//    declaration head before each `{`; on preprocessed tokens, where __device__ has become
//    __attribute__((device)), so macro-built qualifiers are understood. Without step 2 the raw
//    source is used, with the candidate's own object-like macros expanded in declaration heads;
//    conservatively (assembly in a __host__ __device__ function behind #ifdef __CUDA_ARCH__ is
//    rejected there, accepted with step 2).
// 4. kf_forward must be defined (a `kf_forward(...) {` somewhere); if not, the verdict is
//    link_error. Whether it really is exported with C linkage is checked on the built library
//    (library_check.hpp), as are the imported symbols and the load-time code.
// A source that nvcc -E refuses is not judged on the raw pass alone: the raw pass does not expand
// macros (`#define X asm volatile` hides host assembly from it), and an `#error` that fires only
// under the check's defines would otherwise switch step 2 off. Its verdict is compile_error, with
// nvcc -E's first error as the reason (see static_status::compile_error for why not rejected).

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sandbox/static_rules.hpp"
#include "sandbox/toolchain.hpp"

namespace kforge::sandbox {

struct check_options {
  /// Libraries the task allows (cuBLAS, cuDNN).
  library_permissions libraries;
  /// When set, also check nvcc's preprocessed output (step 2). Not owned.
  const toolchain* preprocess_with = nullptr;
  /// -arch for preprocessing, as for the build (the evaluator passes compile_options::arch).
  std::string arch = std::string(default_arch);
  /// Limits of the `nvcc -E` run; an overrun is a rejection (macro bombs).
  std::chrono::milliseconds preprocess_time_limit{30'000};
  std::uint64_t preprocess_memory_bytes = 2ull << 30;
  /// Where the private scratch directory goes; empty: the system temporary directory.
  std::string scratch_root;
  /// At most this many findings are collected (the first one is the reason).
  std::size_t max_findings = 20;
};

enum class static_status {
  ok,
  rejected,     ///< a rule is broken
  link_error,   ///< kf_forward is not defined
  /// The source does not preprocess (rule preprocess_error). Not `rejected`: nearly every source
  /// nvcc -E refuses has an honest preprocessor mistake (an unbalanced #if, a bad #if expression,
  /// an #error of its own) that the build would report as the same compile error; calling it
  /// rejected would name a broken rule that was not broken. A source whose #error fires only
  /// under the check's defines (to switch step 2 off) gets the same verdict: it is not compiled,
  /// not run and earns no reward either way, and the reason shows the #error.
  compile_error,
  infra_error,  ///< the check itself failed (no scratch directory, nvcc would not start)
};

/// One broken rule at one place.
struct finding {
  rule why;
  int line = 0;                      ///< 1-based line of the candidate source; 0 if unknown
  std::string what;                  ///< e.g. "`fork`", "#include <stdio.h>"
  bool after_preprocessing = false;  ///< found only after macro expansion
};

/// The outcome: ok, or why not. `reason` is one line naming the rule and the line.
struct static_verdict {
  static_status status = static_status::ok;
  std::string reason;
  std::vector<finding> findings;  ///< all broken rules found (capped), reason's first
  bool ok() const noexcept { return status == static_status::ok; }
};

/// Runs steps 1-4 on `source` (one .cu file in the candidate kernel ABI).
static_verdict check_source(std::string_view source, const check_options& options);

/// Step 2 and 3 on given preprocessor output: only lines the line markers attribute to
/// `candidate_path` are checked. For tests on captured output, and used by check_source.
static_verdict check_preprocessed(std::string_view preprocessed, std::string_view candidate_path,
                                  const check_options& options);

/// "rejected by rule host_system_call at line 7: `fork` (no process, file, ... calls)".
std::string describe(const finding& f);

}  // namespace kforge::sandbox

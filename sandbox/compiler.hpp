#pragma once
// Compiling a candidate into a shared library with the sandbox's fixed flags, under a time and
// memory cap, with the output parsed into diagnostics and ptxas resource usage, the built library
// checked (library_check.hpp), and the outcome cached by content.
//
// The nvcc command is toolchain.hpp's compile_command (-O3 -arch -shared -fPIC, CUDA runtime only)
// plus: `-Xptxas -v` (resource usage), `-Xlinker --no-undefined` (a call to something that does not
// exist is a link_error now, not a dlopen failure in the child later) and, when the task allows it,
// `-lcublas -lcublasLt`.
//
// Limits: nvcc runs in its own process group, killed as a whole at the time limit (verdict
// timeout); every process in it has RLIMIT_AS = memory_limit (nvcc, cicc, ptxas and gcc create no
// CUDA context, so RLIMIT_AS is safe here — unlike in the run child), RLIMIT_FSIZE and no core
// dumps; TMPDIR points into a private directory, so nvcc's intermediate files never meet another
// compile's and die with it.
//
// Cache: a directory of entries `<key>/` (candidate.cu, result.json, kernel.so) where key =
// hash(source, full flag list, arch, library permissions, nvcc release and build, kernel_abi.h). An
// entry is built in a private staging directory inside the cache and renamed into place, so readers
// see whole entries only and concurrent processes compiling the same source both succeed (the
// second rename loses, harmlessly). Hits compare the stored source byte for byte and run the library
// check on the stored library again (a library swapped in the cache is rejected). Timeouts and
// out-of-memory failures are not cached. A process killed mid-compile leaves a `.staging-*`
// directory that lookups ignore; there is no eviction yet (the directory is disposable).

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "sandbox/diagnostics.hpp"
#include "sandbox/static_rules.hpp"
#include "sandbox/toolchain.hpp"

namespace kforge::sandbox {

struct compile_options {
  /// The one nvcc target, e.g. "sm_90a" (H100/H200 with wgmma/TMA), "sm_80". A pool resolves
  /// "auto" to its GPU's (pool.hpp) before any compile; the default is the compile-only one.
  std::string arch = std::string(default_arch);
  /// Libraries the task allows; cuBLAS is linked only when set.
  library_permissions libraries;
  /// Wall-clock limit for nvcc and everything it runs.
  std::chrono::milliseconds time_limit{60'000};
  /// RLIMIT_AS of each process in the compile.
  std::uint64_t memory_limit_bytes = 4ull << 30;
  /// RLIMIT_FSIZE of each process in the compile (the .so, the PTX, temporaries).
  std::uint64_t file_size_limit_bytes = 1ull << 30;
  /// Cache directory (created if missing); empty: no cache, the library lives in a private
  /// directory owned by the result.
  std::string cache_dir;
  /// Where private build directories go when there is no cache; empty: the system temp directory.
  std::string scratch_root;
  /// nvcc's captured output is cut here; result.log keeps at most 64 KiB of it.
  std::size_t max_output = 1 << 20;
  /// The library check on the built library (and on a cache hit). Off only where a test must show
  /// what the run stage's confinement stops on its own (evaluator_options::static_checks).
  bool check_library = true;
};

enum class compile_status {
  ok,
  compile_error,  ///< nvcc failed (front end, ptxas, host compiler), or ran out of memory
  link_error,     ///< undefined references, or kf_forward not exported with C linkage
  rejected,       ///< the library breaks a rule (forbidden import, load-time code)
  timeout,        ///< the compile ran past time_limit
  infra_error,    ///< the sandbox's fault: no scratch space, nvcc would not start, ...
};

std::string_view status_name(compile_status s) noexcept;

struct compile_result {
  compile_status status = compile_status::infra_error;
  /// One line: the first error, the rule broken, the limit hit; empty when ok.
  std::string reason;
  std::vector<diagnostic> diagnostics;
  std::vector<resource_usage> resources;
  /// The built library (ok only): in the cache, or in `scratch` when there is no cache.
  std::string library;
  /// nvcc's output, cut at 64 KiB.
  std::string log;
  /// How long nvcc took when the result was made (a cache hit keeps the original time).
  double nvcc_ms = 0;
  /// How long this call took (a cache hit: reading the entry).
  double elapsed_ms = 0;
  bool cache_hit = false;
  std::string cache_key;
  /// Owns the private directory holding `library` when there is no cache; the directory goes when
  /// the last copy of the result does.
  std::shared_ptr<const void> scratch;

  bool ok() const noexcept { return status == compile_status::ok; }
};

/// The nvcc argument list for a candidate, with the sandbox's additions (see the header comment).
std::vector<std::string> candidate_command(const toolchain& tc, const std::string& source,
                                           const std::string& output, const compile_options& opt);

/// The cache key: 32 hex digits (two FNV-1a 64 with different seeds) over the source, the full
/// flag list (paths left out), the arch, the library permissions, the nvcc release and build, and
/// the kernel ABI header.
std::string compile_key(const toolchain& tc, std::string_view source, const compile_options& opt);

/// Compiles `source` (one .cu file in the candidate kernel ABI). Never throws; every failure is a
/// status with a reason.
compile_result compile(const toolchain& tc, std::string_view source, const compile_options& opt);

}  // namespace kforge::sandbox

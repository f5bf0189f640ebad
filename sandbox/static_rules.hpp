#pragma once
// The rules a candidate source (and the library built from it) must keep, as data: the include
// allowlist, the forbidden identifiers and imported symbols, each tagged with the rule it breaks.
// The lists are the documentation: a prompt can quote allowed_includes() verbatim.
//
// What the rules decide:
// - cudaDeviceSynchronize / cudaThreadSynchronize are forbidden: all work goes on the stream the
//   sandbox passes, and the sandbox synchronises; a device-wide wait in kf_forward only hides work
//   from the timer. cudaStreamSynchronize stays allowed (a data-dependent host decision may need
//   it).
// - Pinned and managed host memory (cudaMallocHost, cudaHostAlloc, cudaHostRegister,
//   cudaMallocManaged, __managed__ variables) are forbidden: they let a candidate keep or pass
//   state outside the device memory and the stream it was given. Device allocations (cudaMalloc)
//   stay allowed; abuse of them is caught at run time.
// - cuBLAS / cuDNN headers and identifiers only when the task allows them; other CUDA libraries
//   (cuFFT, cuRAND, NVRTC, nvJitLink, NCCL, the driver API) never — NVRTC/nvJitLink would let a
//   candidate compile and load code the sandbox never checked.
// - Generic names (open, read, write, close, kill, signal, system, exit, ...) are matched only in
//   call form, or when qualified with `::`/`std::` or address-taken, so a double-buffer index
//   called `read` is not rejected. The library check on the compiled .so closes what this leaves
//   open, whatever the spelling.
// - The built library's imports are checked against an allowlist (import_allowed): the CUDA
//   runtime's API, cuBLAS where allowed, and a short list of C/C++ runtime functions that honest
//   kernels were seen to import. A deny list can only name the escapes someone thought of; an
//   allowlist also refuses the ones nobody did. The deny lists stay in front of it for the source
//   checks and for the better reason (the rule a known name breaks, at its line).

#include <optional>
#include <string_view>
#include <vector>

namespace kforge::sandbox {

enum class rule {
  forbidden_include,    ///< #include outside the allowlist, or a computed #include
  forbidden_directive,  ///< #pragma outside {unroll, nounroll, once}, #line, #include_next, ...
  host_system_call,     ///< process, file, socket, dynamic loading, ptrace, signal, exit, sleep,
                        ///< threads
  stream_graph_event,   ///< creating or destroying streams, events, graphs; host callbacks
  device_control,  ///< device-wide state: limits, reset, device selection, device sync, IPC, driver
                   ///< API
  host_memory,     ///< pinned / managed host memory
  library_not_allowed,  ///< cuBLAS / cuDNN without the task's permission; other CUDA libraries
  host_asm,             ///< inline assembly in host code, or assembly that makes system calls
  load_time_code,       ///< code that runs when the library is loaded or unloaded
  obfuscation,  ///< identifiers spelled with non-ASCII / universal character names, pasted names
  import_not_allowed,   ///< the built library imports a symbol outside the import allowlist
  missing_entry_point,  ///< no definition of kf_forward (a link_error verdict, not rejected)
  preprocess_error,     ///< nvcc -E fails on the source (a compile_error verdict, not rejected)
};

/// The rule's stable name, as it appears in reasons ("host_system_call").
std::string_view rule_name(rule r) noexcept;
/// One line saying what the rule forbids, for the model to read.
std::string_view rule_summary(rule r) noexcept;

/// What the task allows beyond the CUDA runtime.
struct library_permissions {
  bool cublas = false;  ///< cublas_v2.h / cublasLt.h and cublas* calls; links -lcublas -lcublasLt
  bool cudnn = false;   ///< cudnn.h and cudnn* calls (the compiler does not link cuDNN yet)
};

/// Whether `#include <header>` (or "header") is allowed. Exact names, plus the folders cuda/
/// (libcu++), cooperative_groups/ and cub/ (header-only device libraries).
bool include_allowed(std::string_view header, const library_permissions& perms) noexcept;

/// The allowlist, for documentation and prompts (folders end with '/').
std::vector<std::string_view> allowed_includes(const library_permissions& perms);

enum class match_mode {
  anywhere,   ///< any use of the identifier (distinctive names: fork, dlopen, cudaEventCreate, ...)
  call_form,  ///< only `name(`, `&name`, `::name`, `std::name` (generic names: read, open, exit)
};

struct forbidden_name {
  rule why;
  match_mode mode;
};

/// The rule an identifier breaks, if any.
std::optional<forbidden_name> forbidden_identifier(std::string_view name,
                                                   const library_permissions& perms) noexcept;

/// Names that are forbidden only as `std::name` (std::thread, std::async, ...).
std::optional<rule> forbidden_std_member(std::string_view name) noexcept;

/// The rule a symbol imported by the compiled library breaks, if any (undefined dynamic symbols,
/// version suffix stripped). Catches every spelling, alias and function pointer of a libc call.
std::optional<rule> forbidden_import(std::string_view symbol,
                                     const library_permissions& perms) noexcept;

/// Whether the built library may import `symbol` (version suffix stripped), a strong import unless
/// `weak`. Ask forbidden_import first: it names the rule a known escape breaks. A strong import was
/// resolved at link time against the libraries nvcc linked (`-Xlinker --no-undefined`); a weak one
/// may stay unresolved there and bind to any library loaded at run time, so only the toolchain's
/// own weak references are allowed.
bool import_allowed(std::string_view symbol, const library_permissions& perms,
                    bool weak = false) noexcept;

/// Whether `#pragma <text>` is allowed (text is what follows the word pragma).
bool pragma_allowed(std::string_view text) noexcept;

}  // namespace kforge::sandbox

#include "sandbox/static_rules.hpp"

#include <algorithm>
#include <cctype>

namespace kforge::sandbox {

namespace {

using sv = std::string_view;

// The tables read better in rows than one entry a line.
// clang-format off
constexpr sv always_allowed_includes[] = {
    // The ABI and the CUDA runtime.
    "kforge/kernel_abi.h", "cuda_runtime.h", "cuda_runtime_api.h", "device_launch_parameters.h",
    "vector_types.h", "vector_functions.h",
    // Number formats and device intrinsics.
    "cuda_fp16.h", "cuda_bf16.h", "cuda_fp8.h", "mma.h", "math_constants.h", "cuda_pipeline.h",
    "cuda_pipeline_primitives.h", "cuda_awbarrier.h", "cuda_awbarrier_primitives.h",
    "cooperative_groups.h",
    // The C/C++ headers a kernel plausibly needs: sizes, limits, math, traits. No I/O, no threads.
    "stdint.h", "cstdint", "stddef.h", "cstddef", "math.h", "cmath", "float.h", "cfloat",
    "limits.h", "climits", "limits", "stdbool.h", "assert.h", "cassert", "type_traits", "utility",
    "algorithm", "array", "initializer_list"};
// Header-only device libraries (libcu++, cooperative groups, CUB). Their inline host code can call
// what a candidate may not (cub's caching allocator creates events): the library check on the
// built .so sees those calls as imports.
constexpr sv allowed_include_folders[] = {"cuda/", "cooperative_groups/", "cub/"};
constexpr sv cublas_includes[] = {"cublas_v2.h", "cublasLt.h", "cublas_api.h"};
constexpr sv cudnn_includes[] = {"cudnn.h"};

struct name_entry {
  sv name;
  rule why;
  match_mode mode;
};

constexpr auto A = match_mode::anywhere;
constexpr auto C = match_mode::call_form;
constexpr auto sys = rule::host_system_call;

constexpr name_entry names[] = {
    // Processes.
    {"fork", sys, A}, {"vfork", sys, A}, {"clone", sys, C}, {"clone3", sys, A}, {"execl", sys, A},
    {"execle", sys, A}, {"execlp", sys, A}, {"execv", sys, A}, {"execve", sys, A},
    {"execvp", sys, A}, {"execvpe", sys, A}, {"execveat", sys, A}, {"fexecve", sys, A},
    {"posix_spawn", sys, A}, {"posix_spawnp", sys, A}, {"system", sys, C}, {"popen", sys, A},
    {"pclose", sys, A}, {"daemon", sys, C}, {"setsid", sys, A}, {"pthread_create", sys, A},
    {"pthread_kill", sys, A}, {"pthread_detach", sys, A}, {"sched_setaffinity", sys, A},
    {"setpriority", sys, A}, {"nice", sys, C}, {"_Fork", sys, A}, {"setpgid", sys, A},
    {"setpgrp", sys, A}, {"thrd_create", sys, A}, {"wordexp", sys, A},  // wordexp runs a shell
    // Exit and sleep: the sandbox decides when the process ends and how long a call takes.
    {"exit", sys, C}, {"_exit", sys, A}, {"_Exit", sys, A}, {"quick_exit", sys, A},
    {"abort", sys, C}, {"atexit", sys, A}, {"at_quick_exit", sys, A}, {"on_exit", sys, A},
    {"__cxa_atexit", rule::load_time_code, A}, {"__cxa_thread_atexit", rule::load_time_code, A},
    {"sleep", sys, C}, {"usleep", sys, A}, {"nanosleep", sys, A}, {"clock_nanosleep", sys, A},
    {"sleep_for", sys, A}, {"sleep_until", sys, A},
    // Files and descriptors.
    {"fopen", sys, A}, {"fopen64", sys, A}, {"freopen", sys, A}, {"freopen64", sys, A},
    {"fdopen", sys, A}, {"tmpfile", sys, A}, {"tmpnam", sys, A}, {"mkstemp", sys, A},
    {"opendir", sys, A}, {"readdir", sys, A}, {"open", sys, C}, {"open64", sys, A},
    {"openat", sys, A}, {"openat64", sys, A}, {"openat2", sys, A}, {"creat", sys, C}, {"creat64", sys, A},
    {"read", sys, C}, {"write", sys, C}, {"pread", sys, C}, {"pwrite", sys, C}, {"pread64", sys, A},
    {"pwrite64", sys, A}, {"readv", sys, A}, {"writev", sys, A}, {"preadv", sys, A},
    {"pwritev", sys, A}, {"preadv2", sys, A}, {"pwritev2", sys, A}, {"close", sys, C},
    {"pipe", sys, C}, {"pipe2", sys, A}, {"dup", sys, C}, {"dup2", sys, A}, {"dup3", sys, A},
    {"fcntl", sys, A}, {"ioctl", sys, A}, {"remove", sys, C}, {"rename", sys, C},
    {"renameat", sys, A}, {"unlink", sys, A}, {"unlinkat", sys, A}, {"rmdir", sys, A},
    {"mkdir", sys, A}, {"mkdirat", sys, A}, {"chdir", sys, A}, {"fchdir", sys, A},
    {"chroot", sys, A}, {"chmod", sys, A}, {"fchmod", sys, A}, {"chown", sys, A},
    {"symlink", sys, A}, {"truncate", sys, C}, {"ftruncate", sys, A}, {"memfd_create", sys, A},
    {"shm_open", sys, A}, {"sendfile", sys, A}, {"splice", sys, A}, {"ifstream", sys, A},
    {"ofstream", sys, A}, {"fstream", sys, A}, {"basic_filebuf", sys, A}, {"inotify_init", sys, A},
    {"eventfd", sys, A},
    // Sockets.
    {"socket", sys, C}, {"socketpair", sys, A}, {"connect", sys, C}, {"bind", sys, C},
    {"listen", sys, C}, {"accept", sys, C}, {"accept4", sys, A}, {"send", sys, C},
    {"sendto", sys, A}, {"sendmsg", sys, A}, {"recv", sys, C}, {"recvfrom", sys, A},
    {"recvmsg", sys, A}, {"getaddrinfo", sys, A}, {"gethostbyname", sys, A},
    // Dynamic loading.
    {"dlopen", sys, A}, {"dlmopen", sys, A}, {"dlsym", sys, A}, {"dlvsym", sys, A},
    {"dladdr", sys, A}, {"dlinfo", sys, A}, {"dlclose", sys, A}, {"__libc_dlopen_mode", sys, A},
    {"__libc_dlsym", sys, A}, {"__libc_system", sys, A}, {"dladdr1", sys, A},
    // Walking the loaded libraries' headers and symbol tables in memory finds `system` without
    // importing it.
    {"dl_iterate_phdr", sys, A}, {"getauxval", sys, A},
    // Tracing, signals, memory protection, raw system calls, process limits, environment.
    {"ptrace", sys, A}, {"process_vm_readv", sys, A}, {"process_vm_writev", sys, A},
    {"signal", sys, C}, {"sigaction", sys, A}, {"sigprocmask", sys, A}, {"pthread_sigmask", sys, A},
    {"raise", sys, C}, {"kill", sys, C}, {"killpg", sys, A}, {"tgkill", sys, A}, {"alarm", sys, C},
    {"sigqueue", sys, A}, {"pidfd_open", sys, A}, {"pidfd_send_signal", sys, A},
    {"pidfd_getfd", sys, A},
    {"setitimer", sys, A}, {"timer_create", sys, A}, {"mmap", sys, A}, {"mmap64", sys, A},
    {"mprotect", sys, A}, {"pkey_mprotect", sys, A}, {"syscall", sys, A}, {"prctl", sys, A},
    {"setrlimit", sys, A}, {"prlimit", sys, A}, {"getenv", sys, A}, {"secure_getenv", sys, A},
    {"setenv", sys, A}, {"putenv", sys, A}, {"unsetenv", sys, A}, {"environ", sys, A},
    {"__environ", sys, A},
    // Streams, events, graphs, host callbacks (prefix entries are below).
    {"cudaStreamDestroy", rule::stream_graph_event, A},
    {"cudaStreamWaitEvent", rule::stream_graph_event, A},
    {"cudaStreamAddCallback", rule::stream_graph_event, A},
    {"cudaLaunchHostFunc", rule::stream_graph_event, A},
    // Device-wide state.
    {"cudaDeviceSetLimit", rule::device_control, A}, {"cudaDeviceReset", rule::device_control, A},
    {"cudaSetDevice", rule::device_control, A}, {"cudaSetDeviceFlags", rule::device_control, A},
    {"cudaSetValidDevices", rule::device_control, A}, {"cudaInitDevice", rule::device_control, A},
    {"cudaDeviceSynchronize", rule::device_control, A},
    {"cudaThreadSynchronize", rule::device_control, A}, {"cudaThreadExit", rule::device_control, A},
    {"cudaThreadSetLimit", rule::device_control, A},
    {"cudaThreadSetCacheConfig", rule::device_control, A},
    {"cudaDeviceSetCacheConfig", rule::device_control, A},
    {"cudaDeviceSetSharedMemConfig", rule::device_control, A},
    {"cudaDeviceSetMemPool", rule::device_control, A},
    {"cudaDeviceEnablePeerAccess", rule::device_control, A},
    {"cudaDeviceDisablePeerAccess", rule::device_control, A},
    {"cudaCtxResetPersistingL2Cache", rule::device_control, A},
    {"cudaStreamSetAttribute", rule::device_control, A},
    {"cudaDeviceFlushGPUDirectRDMAWrites", rule::device_control, A},
    {"cudaProfilerStart", rule::device_control, A}, {"cudaProfilerStop", rule::device_control, A},
    // Host memory.
    {"cudaMallocHost", rule::host_memory, A}, {"cudaHostAlloc", rule::host_memory, A},
    {"cudaHostRegister", rule::host_memory, A}, {"cudaHostUnregister", rule::host_memory, A},
    {"cudaHostGetDevicePointer", rule::host_memory, A}, {"cudaMallocManaged", rule::host_memory, A},
    {"mlock", rule::host_memory, A}, {"__managed__", rule::host_memory, A},
    // What nvcc's registration code imports for a __managed__ variable, however it was spelled.
    {"__cudaRegisterManagedVar", rule::host_memory, A},
};

struct prefix_entry {
  sv prefix;
  rule why;
};

constexpr prefix_entry prefixes[] = {
    {"cudaStreamCreate", rule::stream_graph_event},
    {"cudaStreamBeginCapture", rule::stream_graph_event},
    {"cudaStreamEndCapture", rule::stream_graph_event}, {"cudaEvent", rule::stream_graph_event},
    {"cudaGraph", rule::stream_graph_event}, {"cudaUserObject", rule::stream_graph_event},
    {"cuStream", rule::stream_graph_event}, {"cuEvent", rule::stream_graph_event},
    {"cuGraph", rule::stream_graph_event}, {"cudaIpc", rule::device_control},
    {"cudaGetDriverEntryPoint", rule::device_control}, {"cudaMemcpyPeer", rule::device_control},
    {"cudaLibrary", rule::device_control},
    // The driver API: cuda.h is not allowed, so these can only come from hand-written declarations.
    {"cuInit", rule::device_control}, {"cuCtx", rule::device_control},
    {"cuDevice", rule::device_control}, {"cuModule", rule::device_control},
    {"cuLibrary", rule::device_control}, {"cuLaunch", rule::device_control},
    {"cuMem", rule::device_control}, {"cuGetProcAddress", rule::device_control},
    {"cuLink", rule::device_control}, {"cuIpc", rule::device_control},
    {"cuKernel", rule::device_control}, {"cuFunc", rule::device_control},
    {"cuGreenCtx", rule::device_control}, {"cuProfiler", rule::device_control},
    {"cuCheckpoint", rule::device_control}, {"cuCoredump", rule::device_control},
    // CUDA libraries never allowed.
    {"nvrtc", rule::library_not_allowed}, {"nvJitLink", rule::library_not_allowed},
    {"cufft", rule::library_not_allowed}, {"curand", rule::library_not_allowed},
    {"cusparse", rule::library_not_allowed}, {"cusolver", rule::library_not_allowed},
    {"nccl", rule::library_not_allowed}, {"cuFile", rule::library_not_allowed},
};

// Imported symbols forbidden beyond the identifier lists: libc calls too generic to match in
// source, and libstdc++ facilities whose mangled names contain these pieces.
constexpr sv import_only_names[] = {
    "wait", "waitpid", "wait4", "waitid", "poll", "ppoll", "select", "pselect", "epoll_create",
    "epoll_create1", "epoll_wait", "getpid", "getppid", "fgets", "fread", "fwrite", "fscanf",
    "scanf", "getchar", "gets"};
constexpr sv import_mangled_pieces[] = {"filesystem",    "basic_ifstream", "basic_ofstream",
                                        "basic_fstream", "basic_filebuf",  "_ZNSt6thread",
                                        "this_thread",   "_ZSt5async"};

// The import allowlist. Evidence: the libraries built with the sandbox's flags (nvcc 13,
// -cudart shared, sm_90a) from every suite candidate that reaches the run stage
// (tests/sandbox/suite: ok, wrong_answer, hack_suspected, runtime_error, timeout) and every kernel
// the corpus writer emits (`kforge corpus build`, builtin and synthesized tasks), listed with
// `nm -D --undefined-only`. Beyond those, the C/C++ runtime support an honest kf_forward's host
// code pulls in through the allowed headers (operator new/delete, exceptions, <cmath>, <cassert>,
// std::array::at). Everything else a candidate can reach (stdio, files, processes, time zones,
// threads, the loader) is refused, whether or not a deny list names it.
constexpr sv runtime_imports[] = {
    // In every library: nvcc's fatbinary registration registers its cleanup with __cxa_atexit
    // (crtbegin's __do_global_dtors_aux calls __cxa_finalize); crtbegin's weak references to the
    // profiler and transactional-memory hooks.
    "__cxa_atexit", "__cxa_finalize", "__gmon_start__", "_ITM_registerTMCloneTable",
    "_ITM_deregisterTMCloneTable",
    // nvcc's host stub of every non-inline external __device__ function calls exit (forbidden_import
    // says why the import alone proves nothing).
    "exit",
    // Every kernel launch: the host stub keeps the kernel's handle in a function-local static
    // (guarded), and its cleanup path unwinds through the C++ personality routine.
    "__cxa_guard_acquire", "__cxa_guard_release", "__cxa_guard_abort", "__gxx_personality_v0",
    "_Unwind_Resume",
    // Exceptions thrown and caught in host code, `new T[n]` with a bad length, pure virtuals.
    "__cxa_allocate_exception", "__cxa_free_exception", "__cxa_throw", "__cxa_rethrow",
    "__cxa_begin_catch", "__cxa_end_catch", "__cxa_get_exception_ptr", "__cxa_call_terminate",
    "__cxa_throw_bad_array_new_length", "__cxa_pure_virtual", "__cxa_deleted_virtual",
    "_ZSt9terminatev",
    // The type_info vtables a polymorphic class's RTTI points at (data, not calls).
    "_ZTVN10__cxxabiv117__class_type_infoE", "_ZTVN10__cxxabiv120__si_class_type_infoE",
    "_ZTVN10__cxxabiv121__vmi_class_type_infoE",
    // operator new / delete: plain, array, sized, nothrow (std::stable_sort's buffer), aligned.
    "_Znwm", "_Znam", "_ZdlPv", "_ZdaPv", "_ZdlPvm", "_ZdaPvm", "_ZnwmRKSt9nothrow_t",
    "_ZnamRKSt9nothrow_t", "_ZdlPvRKSt9nothrow_t", "_ZdaPvRKSt9nothrow_t", "_ZSt7nothrow",
    "_ZnwmSt11align_val_t", "_ZnamSt11align_val_t", "_ZdlPvSt11align_val_t",
    "_ZdaPvSt11align_val_t", "_ZdlPvmSt11align_val_t", "_ZdaPvmSt11align_val_t",
    // Memory copies g++ emits for struct and array copies (and their _FORTIFY_SOURCE forms), the
    // stack protector Ubuntu's g++ enables by default, and a failed host assert (<cassert> is an
    // allowed header; it ends the process like any host crash, a runtime_error).
    "memcpy", "memmove", "memset", "memcmp", "__memcpy_chk", "__memmove_chk", "__memset_chk",
    "__stack_chk_fail", "__assert_fail",
    // Reading the wall clock changes nothing outside the process. The suite's host_spin_loop
    // busy-waits on time() and must reach the run stage: its time limit is what it tests.
    "time"};

// <cmath> / <math.h> functions called from host code; each also with an f (float) or l (long
// double) suffix.
constexpr sv math_functions[] = {
    "acos", "asin", "atan", "atan2", "cos", "sin", "tan", "sincos", "acosh", "asinh", "atanh",
    "cosh", "sinh", "tanh", "exp", "exp2", "exp10", "expm1", "frexp", "ldexp", "log", "log10",
    "log1p", "log2", "logb", "ilogb", "modf", "scalbn", "scalbln", "cbrt", "fabs", "hypot", "pow",
    "sqrt", "erf", "erfc", "tgamma", "lgamma", "ceil", "floor", "nearbyint", "rint", "lrint",
    "llrint", "round", "lround", "llround", "trunc", "fmod", "remainder", "remquo", "copysign",
    "nan", "nextafter", "nexttoward", "fdim", "fmax", "fmin", "fma"};

// The toolchain's own weak references (crtbegin): nothing else may be imported weakly.
constexpr sv toolchain_weak_imports[] = {"__gmon_start__", "_ITM_registerTMCloneTable",
                                         "_ITM_deregisterTMCloneTable", "__cxa_finalize"};

// clang-format on

bool starts_with(sv s, sv p) { return s.substr(0, p.size()) == p; }

sv without_version(sv symbol) { return symbol.substr(0, symbol.find('@')); }

bool is_math_function(sv symbol) {
  auto listed = [](sv s) {
    return std::find(std::begin(math_functions), std::end(math_functions), s) !=
           std::end(math_functions);
  };
  if (listed(symbol)) return true;
  const bool suffixed = !symbol.empty() && (symbol.back() == 'f' || symbol.back() == 'l');
  return suffixed && listed(symbol.substr(0, symbol.size() - 1));
}

// std::__throw_length_error, std::__throw_out_of_range_fmt, ...: what the allowed headers' inline
// code calls to throw (std::array::at). Mangled `_ZSt<length>__throw_<what>`.
bool is_std_throw_helper(sv symbol) {
  if (!starts_with(symbol, "_ZSt")) return false;
  std::size_t k = 4;
  while (k < symbol.size() && std::isdigit(static_cast<unsigned char>(symbol[k]))) ++k;
  return k > 4 && starts_with(symbol.substr(k), "__throw_");
}

}  // namespace

std::string_view rule_name(rule r) noexcept {
  switch (r) {
    case rule::forbidden_include:
      return "forbidden_include";
    case rule::forbidden_directive:
      return "forbidden_directive";
    case rule::host_system_call:
      return "host_system_call";
    case rule::stream_graph_event:
      return "stream_graph_event";
    case rule::device_control:
      return "device_control";
    case rule::host_memory:
      return "host_memory";
    case rule::library_not_allowed:
      return "library_not_allowed";
    case rule::host_asm:
      return "host_asm";
    case rule::load_time_code:
      return "load_time_code";
    case rule::obfuscation:
      return "obfuscation";
    case rule::import_not_allowed:
      return "import_not_allowed";
    case rule::missing_entry_point:
      return "missing_entry_point";
    case rule::preprocess_error:
      return "preprocess_error";
  }
  return "unknown";
}

std::string_view rule_summary(rule r) noexcept {
  switch (r) {
    case rule::forbidden_include:
      return "only the allowlisted headers may be included";
    case rule::forbidden_directive:
      return "only #pragma unroll/nounroll/once; no #line, #include_next or other directives";
    case rule::host_system_call:
      return "no process, file, socket, dynamic-loading, ptrace, signal, exit, sleep or thread "
             "calls";
    case rule::stream_graph_event:
      return "no creating streams, events or graphs and no host callbacks: use the given stream";
    case rule::device_control:
      return "no device-wide state: limits, reset, device selection, device synchronize, IPC, "
             "driver API";
    case rule::host_memory:
      return "no pinned or managed host memory";
    case rule::library_not_allowed:
      return "no CUDA library beyond the runtime, except cuBLAS/cuDNN where the task allows them";
    case rule::host_asm:
      return "inline assembly only inside __device__/__global__ code, and never system calls";
    case rule::load_time_code:
      return "no code that runs when the library is loaded or unloaded (constructors, static "
             "initialisers, init sections)";
    case rule::obfuscation:
      return "identifiers must be plain ASCII, and token pasting must not build forbidden names";
    case rule::import_not_allowed:
      return "the library may import only the CUDA runtime's API, cuBLAS where the task allows it, "
             "and C/C++ runtime support: memcpy/memset/memmove, math functions, operator "
             "new/delete, exceptions";
    case rule::missing_entry_point:
      return "kf_forward must be defined with C linkage";
    case rule::preprocess_error:
      return "the source must preprocess (nvcc -E, the host compiler's view of the macros)";
  }
  return "";
}

bool include_allowed(std::string_view header, const library_permissions& perms) noexcept {
  auto in = [&](const auto& list) {
    return std::find(std::begin(list), std::end(list), header) != std::end(list);
  };
  if (header.find("..") != sv::npos) return false;
  if (in(always_allowed_includes)) return true;
  for (sv folder : allowed_include_folders)
    if (starts_with(header, folder) && header.size() > folder.size()) return true;
  if (perms.cublas && in(cublas_includes)) return true;
  if (perms.cudnn && in(cudnn_includes)) return true;
  return false;
}

std::vector<std::string_view> allowed_includes(const library_permissions& perms) {
  std::vector<sv> all(std::begin(always_allowed_includes), std::end(always_allowed_includes));
  all.insert(all.end(), std::begin(allowed_include_folders), std::end(allowed_include_folders));
  if (perms.cublas) all.insert(all.end(), std::begin(cublas_includes), std::end(cublas_includes));
  if (perms.cudnn) all.insert(all.end(), std::begin(cudnn_includes), std::end(cudnn_includes));
  return all;
}

std::optional<forbidden_name> forbidden_identifier(std::string_view name,
                                                   const library_permissions& perms) noexcept {
  for (const auto& e : names)
    if (e.name == name) return forbidden_name{e.why, e.mode};
  for (const auto& p : prefixes)
    if (starts_with(name, p.prefix)) return forbidden_name{p.why, match_mode::anywhere};
  if (!perms.cublas && starts_with(name, "cublas"))
    return forbidden_name{rule::library_not_allowed, match_mode::anywhere};
  if (!perms.cudnn && starts_with(name, "cudnn"))
    return forbidden_name{rule::library_not_allowed, match_mode::anywhere};
  return std::nullopt;
}

std::optional<rule> forbidden_std_member(std::string_view name) noexcept {
  if (name == "thread" || name == "jthread" || name == "async" || name == "this_thread" ||
      name == "filesystem")
    return rule::host_system_call;
  return std::nullopt;
}

std::optional<rule> forbidden_import(std::string_view symbol,
                                     const library_permissions& perms) noexcept {
  symbol = without_version(symbol);
  // nvcc's own registration code registers its cleanup with __cxa_atexit in every library.
  if (symbol == "__cxa_atexit" || symbol == "__cxa_finalize") return std::nullopt;
  // nvcc gives every non-inline __device__ function with external linkage a host stub whose body
  // is `exit(...)`, so correct kernels import exit. A call the candidate wrote is caught in the
  // source (also after macro expansion), so the import alone proves nothing.
  if (symbol == "exit") return std::nullopt;
  if (auto f = forbidden_identifier(symbol, perms)) return f->why;
  for (sv n : import_only_names)
    if (symbol == n) return rule::host_system_call;
  if (starts_with(symbol, "_Z"))
    for (sv piece : import_mangled_pieces)
      if (symbol.find(piece) != sv::npos) return rule::host_system_call;
  return std::nullopt;
}

bool import_allowed(std::string_view symbol, const library_permissions& perms,
                    bool weak) noexcept {
  symbol = without_version(symbol);
  auto in = [&](const auto& list) {
    return std::find(std::begin(list), std::end(list), symbol) != std::end(list);
  };
  if (weak) return in(toolchain_weak_imports);
  // The CUDA runtime's API (libcudart, linked shared) and nvcc's registration and launch code
  // (__cudaRegisterFatBinary, __cudaRegisterFunction, __cudaLaunchKernel, ...). No other library
  // nvcc links exports these prefixes, and a strong import resolved at link time.
  if (starts_with(symbol, "cuda") || starts_with(symbol, "__cuda")) return true;
  if (perms.cublas && starts_with(symbol, "cublas")) return true;  // cublas*, cublasLt*
  // Type info objects (_ZTI) and their names (_ZTS): data a throw or a dynamic_cast refers to.
  if (starts_with(symbol, "_ZTI") || starts_with(symbol, "_ZTS")) return true;
  return in(runtime_imports) || is_math_function(symbol) || is_std_throw_helper(symbol);
}

bool pragma_allowed(std::string_view text) noexcept {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front())))
    text.remove_prefix(1);
  sv word = text.substr(0, text.find_first_of(" \t("));
  return word == "unroll" || word == "nounroll" || word == "once";
}

}  // namespace kforge::sandbox

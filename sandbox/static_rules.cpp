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
    {"setpriority", sys, A}, {"nice", sys, C},
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
    {"openat", sys, A}, {"openat2", sys, A}, {"creat", sys, C}, {"creat64", sys, A},
    {"read", sys, C}, {"write", sys, C}, {"pread", sys, C}, {"pwrite", sys, C}, {"pread64", sys, A},
    {"pwrite64", sys, A}, {"readv", sys, A}, {"writev", sys, A}, {"close", sys, C},
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
    {"__libc_dlsym", sys, A}, {"__libc_system", sys, A},
    // Tracing, signals, memory protection, raw system calls, process limits, environment.
    {"ptrace", sys, A}, {"process_vm_readv", sys, A}, {"process_vm_writev", sys, A},
    {"signal", sys, C}, {"sigaction", sys, A}, {"sigprocmask", sys, A}, {"pthread_sigmask", sys, A},
    {"raise", sys, C}, {"kill", sys, C}, {"killpg", sys, A}, {"tgkill", sys, A}, {"alarm", sys, C},
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
    {"mlock", rule::host_memory, A},
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
    "epoll_create1", "epoll_wait", "getpid", "fgets", "fread", "fwrite", "fscanf", "scanf",
    "getchar", "gets"};
constexpr sv import_mangled_pieces[] = {"filesystem",    "basic_ifstream", "basic_ofstream",
                                        "basic_fstream", "basic_filebuf",  "_ZNSt6thread",
                                        "this_thread",   "_ZSt5async"};

// clang-format on

bool starts_with(sv s, sv p) { return s.substr(0, p.size()) == p; }

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
    case rule::missing_entry_point:
      return "missing_entry_point";
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
    case rule::missing_entry_point:
      return "kf_forward must be defined with C linkage";
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
  if (const auto at = symbol.find('@'); at != sv::npos) symbol = symbol.substr(0, at);
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

bool pragma_allowed(std::string_view text) noexcept {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front())))
    text.remove_prefix(1);
  sv word = text.substr(0, text.find_first_of(" \t("));
  return word == "unroll" || word == "nounroll" || word == "once";
}

}  // namespace kforge::sandbox

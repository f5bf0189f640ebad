#pragma once
// The CUDA toolchain the sandbox compiles candidates with: where nvcc is, which release it is, and
// whether a known-good candidate in the kernel ABI compiles with the sandbox's fixed flags.
// Compilation needs no GPU, so this works (and is tested) on CPU-only hosts too.

#include <string>
#include <vector>

#include "common/gpu_arch.hpp"
#include "common/result.hpp"

namespace kforge::sandbox {

struct toolchain {
  std::string nvcc;       ///< absolute path of nvcc
  std::string release;    ///< e.g. "13.0"
  std::string abi_include;  ///< folder holding kforge/kernel_abi.h
};

/// Finds nvcc: $KFORGE_NVCC, then PATH, then /usr/local/cuda/bin. The error says where it looked.
result<toolchain> find_toolchain();

/// Whether nvcc can build for `arch` the sandbox's way (common/gpu_arch.hpp, where the manifest
/// reader finds it too).
using kforge::valid_arch;

/// nvcc's flags for machine code of `arch` only: "sm_90a" -> -gencode arch=compute_90a,code=sm_90a.
/// `-arch=sm_90a` would also embed PTX for compute_90 and compute_90a (for JIT on GPUs not yet
/// made), a second preprocess and cicc pass, about a third of a compile, for a library that only
/// ever runs on the GPU it was built for. The static check preprocesses with the same flags, so it
/// sees the same macros (__CUDA_ARCH_FEAT_SM90_ALL) as the build.
std::vector<std::string> arch_flags(const std::string& arch);

/// The fixed nvcc command line for a candidate (docs/kernel-abi.md): -O3, machine code for `arch`
/// only (`-gencode arch=compute_XX,code=sm_XX`: no embedded PTX), -shared, -fPIC, linking only the
/// CUDA runtime.
std::vector<std::string> compile_command(const toolchain& tc, const std::string& source,
                                         const std::string& output, const std::string& arch);

/// A minimal correct candidate (y = relu(x), float32), the probe kernel.
const char* known_good_candidate();

struct compile_probe {
  bool ok = false;
  double seconds = 0;
  std::string log;  ///< nvcc's output
};

/// Compiles known_good_candidate() into `out_dir`/probe.so for `arch` (e.g. "sm_90a").
result<compile_probe> compile_known_good(const toolchain& tc, const std::string& out_dir,
                                         const std::string& arch);

}  // namespace kforge::sandbox

#pragma once
// What LibTorch this build links and which devices it sees. `kforge run` reports it so a user knows
// before a run starts whether the trainer and the engine sampler will find their GPUs.
// Kept free of torch headers: only torch_env.cpp pays LibTorch's compile time.

#include <string>
#include <vector>

namespace kforge::trainer {

struct torch_env {
  std::string torch_version;         ///< e.g. "1.13.1" (Debian, CPU) or "2.11.0" (GPU host)
  bool cuda_available = false;       ///< LibTorch built with CUDA and a driver + device present
  int cuda_devices = 0;              ///< devices visible to this process
  std::vector<std::string> devices;  ///< "NVIDIA H200 (sm_90, 139 GiB)" per device
  bool nccl_built = false;           ///< this build has the NCCL data-parallel path
};

torch_env probe_torch();

/// Runs a small autograd step (y = sum(w * x), dy/dw) on CPU and, when present, on GPU 0; returns
/// an empty string on success or what went wrong. Checks the LibTorch install is usable at all.
std::string torch_self_test();

}  // namespace kforge::trainer

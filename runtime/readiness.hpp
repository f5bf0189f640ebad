#pragma once
// What each stage of a manifest needs and what this host offers: printed by `kforge run` before it
// starts, so a user sees at once which stages are real, which are stand-ins, and what is missing.

#include <string>
#include <vector>

#include "config/manifest.hpp"

namespace kforge::pipeline {

struct host_facts {
  int gpus = 0;                      ///< visible CUDA devices
  std::vector<std::string> devices;  ///< one line per device
  std::string gpu_source;            ///< how `gpus` was found ("LibTorch", "nvidia-smi", ...)
  std::string torch;                 ///< "LibTorch 1.13.1 (CPU)" or why it is absent
  bool torch_cuda = false;
  std::string nvcc;                  ///< "nvcc 13.0 (/usr/local/cuda/bin/nvcc)" or why it is absent
  bool nvcc_ok = false;
  /// Each GPU's memory in bytes, by index, as nvidia-smi reports it (empty: unknown).
  std::vector<double> gpu_memory;
};

/// Looks at this host: LibTorch (when built with it), GPUs, nvcc.
host_facts probe_host();

/// A table: per stage kind, the processes hosting it, its logic today, and what it needs here.
std::string readiness_report(const manifest& m, const host_facts& h);

}  // namespace kforge::pipeline

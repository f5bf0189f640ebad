#pragma once
// Facts about a GPU: what timing needs (L2 size) and what prompts show the model. Plain data here,
// so the prompt builder (tasks/) and the sandbox share one struct; the sandbox queries a device
// and converts to and from JSON (sandbox/gpu_facts.hpp). A zero or empty field is unknown.
#include <cstdint>
#include <string>

#include "common/gpu_arch.hpp"

namespace kforge {

struct gpu_facts {
  std::string name;
  int major = 0, minor = 0;             ///< compute capability
  int sm_count = 0;
  std::int64_t shared_per_block = 0;     ///< default max shared memory per block, bytes
  std::int64_t shared_per_block_optin = 0;
  std::int64_t shared_per_sm = 0;
  int registers_per_sm = 0;
  std::int64_t l2_bytes = 0;
  std::int64_t memory_bytes = 0;
  double memory_bandwidth_gbs = 0;       ///< peak, from memory clock and bus width (0: unknown)
  /// The nvcc target kernels for this GPU are built for, when that is set rather than derived
  /// from the compute capability (an explicit [sandbox] arch, or the compile-only default): a
  /// setting, not a fact of the device, so JSON does not carry it.
  std::string build_arch;
  /// The nvcc target the sandbox builds for this GPU (what prompts state): build_arch when set,
  /// else the compute capability's (gpu_arch.hpp); "" when neither is known.
  std::string arch() const {
    return build_arch.empty() ? arch_for_compute_capability(major, minor) : build_arch;
  }
};

}  // namespace kforge

#pragma once
// Facts about a GPU that timing needs (L2 size) and that prompts show the model (issue 4's
// hardware context). Queried with the CUDA runtime in GPU builds; to_json/from_json so a process
// without a CUDA context (the supervisor, the task generator) can carry them.
#include <cstdint>
#include <string>

#include "common/result.hpp"

namespace kforge::sandbox {

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
  std::string arch() const { return "sm_" + std::to_string(major) + std::to_string(minor); }
};

std::string to_json(const gpu_facts& f);
result<gpu_facts> gpu_facts_from_json(const std::string& text);

/// Queries device `index` (GPU builds only; elsewhere an error saying so).
result<gpu_facts> query_gpu(int index);

}  // namespace kforge::sandbox

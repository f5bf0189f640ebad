#pragma once
// Facts about a GPU: what timing needs (L2 size) and what prompts show the model. Plain data here,
// so the prompt builder (tasks/) and the sandbox share one struct; the sandbox queries a device
// and converts to and from JSON (sandbox/gpu_facts.hpp). A zero or empty field is unknown.
#include <cstdint>
#include <string>

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
  std::string arch() const { return "sm_" + std::to_string(major) + std::to_string(minor); }
};

}  // namespace kforge

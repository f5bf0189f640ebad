#include "sandbox/gpu_facts.hpp"

#include <nlohmann/json.hpp>

#ifdef KFORGE_SANDBOX_CUDA
#include <cuda_runtime.h>
#endif

namespace kforge::sandbox {

std::string to_json(const gpu_facts& f) {
  return nlohmann::json{{"name", f.name},
                        {"major", f.major},
                        {"minor", f.minor},
                        {"sm_count", f.sm_count},
                        {"shared_per_block", f.shared_per_block},
                        {"shared_per_block_optin", f.shared_per_block_optin},
                        {"shared_per_sm", f.shared_per_sm},
                        {"registers_per_sm", f.registers_per_sm},
                        {"l2_bytes", f.l2_bytes},
                        {"memory_bytes", f.memory_bytes},
                        {"memory_bandwidth_gbs", f.memory_bandwidth_gbs}}
      .dump();
}

result<gpu_facts> gpu_facts_from_json(const std::string& text) {
  try {
    const auto j = nlohmann::json::parse(text);
    gpu_facts f;
    f.name = j.at("name").get<std::string>();
    f.major = j.at("major").get<int>();
    f.minor = j.at("minor").get<int>();
    f.sm_count = j.at("sm_count").get<int>();
    f.shared_per_block = j.at("shared_per_block").get<std::int64_t>();
    f.shared_per_block_optin = j.at("shared_per_block_optin").get<std::int64_t>();
    f.shared_per_sm = j.at("shared_per_sm").get<std::int64_t>();
    f.registers_per_sm = j.at("registers_per_sm").get<int>();
    f.l2_bytes = j.at("l2_bytes").get<std::int64_t>();
    f.memory_bytes = j.at("memory_bytes").get<std::int64_t>();
    f.memory_bandwidth_gbs = j.at("memory_bandwidth_gbs").get<double>();
    return f;
  } catch (const std::exception& e) {
    return error{std::string("gpu facts: ") + e.what()};
  }
}

#ifdef KFORGE_SANDBOX_CUDA
result<gpu_facts> query_gpu(int index) {
  auto attr = [&](cudaDeviceAttr a) {
    int v = 0;
    return cudaDeviceGetAttribute(&v, a, index) == cudaSuccess ? v : 0;
  };
  cudaDeviceProp p{};
  if (const auto e = cudaGetDeviceProperties(&p, index); e != cudaSuccess)
    return error{std::string("cudaGetDeviceProperties: ") + cudaGetErrorString(e)};
  gpu_facts f;
  f.name = p.name;
  f.major = p.major;
  f.minor = p.minor;
  f.sm_count = p.multiProcessorCount;
  f.shared_per_block = static_cast<std::int64_t>(p.sharedMemPerBlock);
  f.shared_per_block_optin = static_cast<std::int64_t>(p.sharedMemPerBlockOptin);
  f.shared_per_sm = static_cast<std::int64_t>(p.sharedMemPerMultiprocessor);
  f.registers_per_sm = p.regsPerMultiprocessor;
  f.l2_bytes = p.l2CacheSize;
  f.memory_bytes = static_cast<std::int64_t>(p.totalGlobalMem);
  // kHz x bits: double data rate, bytes per bit.
  const double clock_khz = attr(cudaDevAttrMemoryClockRate);
  const double bus_bits = attr(cudaDevAttrGlobalMemoryBusWidth);
  f.memory_bandwidth_gbs = 2.0 * clock_khz * 1e3 * (bus_bits / 8.0) / 1e9;
  return f;
}
#else
result<gpu_facts> query_gpu(int) {
  return error{"this kforge was built without CUDA (KFORGE_WITH_CUDA=OFF): no GPU can be queried"};
}
#endif

}  // namespace kforge::sandbox

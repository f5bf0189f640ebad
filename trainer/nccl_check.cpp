#include "trainer/nccl_check.hpp"

#include <algorithm>
#include <chrono>

#include "trainer/cuda_check.hpp"

namespace kforge::trainer {

namespace {

// Owns the per-rank buffers, streams and communicators so every exit path releases them.
struct ranks_state {
  std::vector<int> devices;
  std::vector<float*> buffers;
  std::vector<cudaStream_t> streams;
  std::vector<ncclComm_t> comms;
  ~ranks_state() {
    for (auto c : comms) if (c) ncclCommDestroy(c);
    for (std::size_t i = 0; i < devices.size(); ++i) {
      cudaSetDevice(devices[i]);
      if (i < streams.size() && streams[i]) cudaStreamDestroy(streams[i]);
      if (i < buffers.size() && buffers[i]) cudaFree(buffers[i]);
    }
  }
};

status all_reduce(ranks_state& s, std::size_t elements) {
  KFORGE_NCCL_TRY(ncclGroupStart());
  for (std::size_t i = 0; i < s.devices.size(); ++i)
    KFORGE_NCCL_TRY(ncclAllReduce(s.buffers[i], s.buffers[i], elements, ncclFloat, ncclSum,
                                  s.comms[i], s.streams[i]));
  KFORGE_NCCL_TRY(ncclGroupEnd());
  for (std::size_t i = 0; i < s.devices.size(); ++i) {
    KFORGE_CUDA_TRY(cudaSetDevice(s.devices[i]));
    KFORGE_CUDA_TRY(cudaStreamSynchronize(s.streams[i]));
  }
  return {};
}

}  // namespace

result<nccl_check_report> nccl_allreduce_check(const std::vector<int>& devices,
                                               std::size_t elements, int iters) {
  if (devices.empty()) return error{"nccl check: no devices given"};
  const int n = static_cast<int>(devices.size());
  ranks_state s;
  s.devices = devices;
  s.buffers.assign(n, nullptr);
  s.streams.assign(n, nullptr);
  s.comms.assign(n, nullptr);
  nccl_check_report rep;
  rep.ranks = n;
  rep.bytes = elements * sizeof(float);
  KFORGE_NCCL_TRY(ncclGetVersion(&rep.nccl_version));
  KFORGE_NCCL_TRY(ncclCommInitAll(s.comms.data(), n, devices.data()));

  auto fill = [&]() -> status {
    for (int i = 0; i < n; ++i) {
      std::vector<float> host(elements, static_cast<float>(i + 1));
      KFORGE_CUDA_TRY(cudaSetDevice(devices[i]));
      KFORGE_CUDA_TRY(cudaMemcpy(s.buffers[i], host.data(), rep.bytes, cudaMemcpyHostToDevice));
    }
    return {};
  };
  for (int i = 0; i < n; ++i) {
    KFORGE_CUDA_TRY(cudaSetDevice(devices[i]));
    KFORGE_CUDA_TRY(cudaMalloc(&s.buffers[i], rep.bytes));
    KFORGE_CUDA_TRY(cudaStreamCreate(&s.streams[i]));
  }

  // Correctness first: one all-reduce of rank-valued buffers must give 1 + 2 + ... + n everywhere.
  if (auto st = fill(); !st) return st.err();
  if (auto st = all_reduce(s, elements); !st) return st.err();
  const float expect = static_cast<float>(n * (n + 1) / 2);
  for (int i = 0; i < n; ++i) {
    std::vector<float> host(elements);
    KFORGE_CUDA_TRY(cudaSetDevice(devices[i]));
    KFORGE_CUDA_TRY(cudaMemcpy(host.data(), s.buffers[i], rep.bytes, cudaMemcpyDeviceToHost));
    auto bad = std::find_if(host.begin(), host.end(), [&](float v) { return v != expect; });
    if (bad != host.end())
      return error{"nccl check: rank " + std::to_string(i) + " element " +
                   std::to_string(bad - host.begin()) + " is " + std::to_string(*bad) +
                   ", expected " + std::to_string(expect)};
  }

  // Then time it (values grow; only the duration matters now).
  std::vector<double> us;
  for (int it = 0; it < iters + 3; ++it) {
    const auto t0 = std::chrono::steady_clock::now();
    if (auto st = all_reduce(s, elements); !st) return st.err();
    const auto t1 = std::chrono::steady_clock::now();
    if (it >= 3) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  std::sort(us.begin(), us.end());
  rep.median_us = us.empty() ? 0 : us[us.size() / 2];
  // nccl-tests' bus bandwidth; one rank moves nothing between GPUs, so it has none.
  const double factor = 2.0 * (n - 1) / n;
  rep.bus_bandwidth_gbs = rep.median_us > 0 ? rep.bytes * factor / (rep.median_us * 1e3) : 0;
  return rep;
}

}  // namespace kforge::trainer

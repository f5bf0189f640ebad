#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include "trainer/nccl_check.hpp"
#include "trainer/torch_env.hpp"

TEST_CASE("NCCL all-reduce over every visible GPU gives the exact sum") {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("SKIP: no CUDA device visible (GPU tests run on the GPU host: deploy/gpu-host.sh)\n");
    std::exit(77);
  }
  const auto env = kforge::trainer::probe_torch();
  CHECK(env.cuda_available);
  CHECK(env.cuda_devices == n);
  CHECK(kforge::trainer::torch_self_test() == "");
  std::vector<int> devices;
  for (int i = 0; i < n; ++i) devices.push_back(i);
  auto rep = kforge::trainer::nccl_allreduce_check(devices, 1 << 20);
  REQUIRE_MESSAGE(rep.ok(), (rep.ok() ? "" : rep.message()));
  CHECK(rep->ranks == n);
  CHECK(rep->median_us > 0);
  std::printf("nccl %d ranks, 4 MiB all-reduce: median %.1f us, bus bandwidth %.1f GB/s\n",
              rep->ranks, rep->median_us, rep->bus_bandwidth_gbs);
}

// GPU: the known-good candidate, compiled at run time with the sandbox's flags, loaded with dlopen
// and called through the kernel ABI on a real device.
#include <doctest/doctest.h>

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>

#include "sandbox/process_memory.hpp"
#include "sandbox/toolchain.hpp"
#include "kforge/kernel_abi.h"

namespace fs = std::filesystem;

namespace {
bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}
std::string device_arch() {
  cudaDeviceProp p{};
  cudaGetDeviceProperties(&p, 0);
  // Hopper's arch-specific features (wgmma, TMA) need the "a" variant.
  return "sm_" + std::to_string(p.major) + std::to_string(p.minor) + (p.major == 9 ? "a" : "");
}
}  // namespace

TEST_CASE("the known-good candidate runs on the GPU through the ABI") {
  if (!have_gpu()) {
    std::printf("SKIP: no CUDA device visible (GPU tests run on the GPU host: deploy/gpu-host.sh)\n");
    std::exit(77);
  }
  auto tc = kforge::sandbox::find_toolchain();
  REQUIRE(tc.ok());
  const auto dir = fs::temp_directory_path() / ("kforge-abi-gpu-" + std::to_string(::getpid()));
  auto probe = kforge::sandbox::compile_known_good(*tc, dir.string(), device_arch());
  REQUIRE(probe.ok());
  INFO(probe->log);
  REQUIRE(probe->ok);
  void* lib = dlopen((dir / "probe.so").c_str(), RTLD_NOW | RTLD_LOCAL);
  REQUIRE_MESSAGE(lib != nullptr, dlerror());
  using forward_fn = int (*)(const kf_tensor*, int32_t, kf_tensor*, int32_t, void*, cudaStream_t);
  auto forward = reinterpret_cast<forward_fn>(dlsym(lib, "kf_forward"));
  REQUIRE(reinterpret_cast<void*>(forward) != nullptr);

  const int64_t n = 1 << 20;
  std::vector<float> x(n), y(n, 0.f);
  std::mt19937 rng(7);
  std::normal_distribution<float> dist;
  for (auto& v : x) v = dist(rng);
  float *dx = nullptr, *dy = nullptr;
  REQUIRE(cudaMalloc(&dx, n * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaMalloc(&dy, n * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(cudaMemset(dy, 0xff, n * sizeof(float)) == cudaSuccess);  // poison: NaN
  kf_tensor in{dx, KF_FLOAT32, 1, {n}, {1}};
  kf_tensor out{dy, KF_FLOAT32, 1, {n}, {1}};
  cudaStream_t stream;
  REQUIRE(cudaStreamCreate(&stream) == cudaSuccess);
  CHECK(forward(&in, 1, &out, 1, nullptr, stream) == 0);
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  REQUIRE(cudaMemcpy(y.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) bad += y[i] != (x[i] > 0 ? x[i] : 0.f);
  CHECK(bad == 0);
  cudaStreamDestroy(stream);
  cudaFree(dx);
  cudaFree(dy);
  dlclose(lib);
}

TEST_CASE("NVML's count of this process's device memory follows its own allocations") {
  if (!have_gpu()) {
    std::printf("SKIP: no CUDA device visible (GPU tests run on the GPU host: deploy/gpu-host.sh)\n");
    std::exit(77);
  }
  REQUIRE(cudaFree(nullptr) == cudaSuccess);  // a context, so the process is listed
  char bus_id[32] = {};
  REQUIRE(cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, 0) == cudaSuccess);
  auto meter = kforge::sandbox::process_memory_meter::open(bus_id);
  REQUIRE_MESSAGE(meter.ok(), (meter.ok() ? "" : meter.message()));
  const auto pid = static_cast<unsigned>(::getpid());
  const auto before = meter->used_by(pid);
  // Where the driver reports another PID namespace's IDs, the sandbox's leak check falls back to
  // the GPU's free memory; this host is expected to report ours.
  REQUIRE_MESSAGE(before.ok(), (before.ok() ? "" : before.message()));
  constexpr std::size_t block = std::size_t{512} << 20;
  void* p = nullptr;
  REQUIRE(cudaMalloc(&p, block) == cudaSuccess);
  const auto during = meter->used_by(pid);
  REQUIRE(during.ok());
  CHECK(*during >= *before + block);
  REQUIRE(cudaFree(p) == cudaSuccess);
  const auto after = meter->used_by(pid);
  REQUIRE(after.ok());
  CHECK(*after < *before + block);
  std::printf("NVML: this process held %llu MiB, %llu MiB with a 512 MiB block, %llu MiB after it\n",
              static_cast<unsigned long long>(*before >> 20), static_cast<unsigned long long>(*during >> 20),
              static_cast<unsigned long long>(*after >> 20));
}

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

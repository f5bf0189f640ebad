#include "trainer/torch_env.hpp"

#include <torch/torch.h>
#include <torch/version.h>

#include <sstream>

#ifdef KFORGE_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace kforge::trainer {

torch_env probe_torch() {
  torch_env env;
  env.torch_version = TORCH_VERSION;
  env.cuda_available = torch::cuda::is_available();
  env.cuda_devices = env.cuda_available ? static_cast<int>(torch::cuda::device_count()) : 0;
#ifdef KFORGE_WITH_CUDA
  env.nccl_built = true;
  for (int i = 0; i < env.cuda_devices; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    std::ostringstream s;
    s << p.name << " (sm_" << p.major << p.minor << ", "
      << (p.totalGlobalMem >> 30) << " GiB)";
    env.devices.push_back(s.str());
  }
#endif
  return env;
}

std::string torch_self_test() {
  try {
    auto run = [](torch::Device dev) {
      auto w = torch::full({4}, 2.0, torch::TensorOptions().device(dev).requires_grad(true));
      auto x = torch::arange(4, torch::TensorOptions().dtype(torch::kFloat).device(dev));
      auto y = (w * x).sum();
      y.backward();
      // dy/dw = x, y = 2 * (0 + 1 + 2 + 3) = 12
      const bool ok = y.item<float>() == 12.0f && torch::equal(w.grad().cpu(), x.cpu());
      return ok ? std::string() : "autograd gave wrong values on " + dev.str();
    };
    if (auto why = run(torch::kCPU); !why.empty()) return why;
    if (torch::cuda::is_available()) return run(torch::Device(torch::kCUDA, 0));
    return {};
  } catch (const std::exception& e) {
    return std::string("LibTorch failed: ") + e.what();
  }
}

}  // namespace kforge::trainer

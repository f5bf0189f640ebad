// Correct but far slower than eager: ReLU on 2 blocks of 64 threads, each looping over a
// million elements (well over 20x the baseline on an H200). Expect ok, timed in 3 trials, not
// 30 (sandbox.slow_cutoff), with a reason that says so.
#include <kforge/kernel_abi.h>

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = fmaxf(x[i], 0.0f);
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  if (inputs[0].dtype != KF_FLOAT32 || outputs[0].dtype != KF_FLOAT32) return 2;
  const int64_t n = kf_numel(&inputs[0]);
  if (n == 0) return 0;
  relu_kernel<<<2, 64, 0, stream>>>(static_cast<const float*>(inputs[0].data),
                                     static_cast<float*>(outputs[0].data), n);
  return (int)cudaGetLastError();
}

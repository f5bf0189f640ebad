// Correct: exact (erf) GELU, y = 0.5 * x * (1 + erf(x / sqrt(2))), the formula torch.gelu uses by
// default, in full-precision erff (no fast-math). Any element count. Expect ok.
#include <kforge/kernel_abi.h>

__global__ void gelu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752440f));
  }
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  if (inputs[0].dtype != KF_FLOAT32 || outputs[0].dtype != KF_FLOAT32) return 2;
  const int64_t n = kf_numel(&inputs[0]);
  if (n == 0) return 0;
  const int threads = 256;
  int64_t blocks = (n + threads - 1) / threads;
  if (blocks > 8192) blocks = 8192;
  gelu_kernel<<<(unsigned)blocks, threads, 0, stream>>>(
      static_cast<const float*>(inputs[0].data), static_cast<float*>(outputs[0].data), n);
  return (int)cudaGetLastError();
}

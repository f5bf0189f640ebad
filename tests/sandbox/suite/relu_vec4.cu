// Correct: ReLU with 16-byte float4 loads/stores for the bulk and a scalar kernel for the tail
// (numel % 4 elements, e.g. 3 of the 7x33 variant's 231); falls back to scalar code when a pointer
// is not 16-byte aligned. Expect ok.
#include <kforge/kernel_abi.h>

__global__ void relu_vec4_kernel(const float4* __restrict__ x, float4* __restrict__ y,
                                 int64_t n4) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
    float4 v = x[i];
    v.x = fmaxf(v.x, 0.0f);
    v.y = fmaxf(v.y, 0.0f);
    v.z = fmaxf(v.z, 0.0f);
    v.w = fmaxf(v.w, 0.0f);
    y[i] = v;
  }
}

__global__ void relu_scalar_kernel(const float* __restrict__ x, float* __restrict__ y,
                                   int64_t begin, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = begin + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = fmaxf(x[i], 0.0f);
}

static unsigned grid_for(int64_t work, int threads) {
  int64_t blocks = (work + threads - 1) / threads;
  if (blocks > 8192) blocks = 8192;
  return blocks < 1 ? 1u : (unsigned)blocks;
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  if (inputs[0].dtype != KF_FLOAT32 || outputs[0].dtype != KF_FLOAT32) return 2;
  const int64_t n = kf_numel(&inputs[0]);
  if (n == 0) return 0;
  const float* x = static_cast<const float*>(inputs[0].data);
  float* y = static_cast<float*>(outputs[0].data);
  const uintptr_t addresses = reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y);
  const bool aligned = (addresses & 15) == 0;
  const int64_t n4 = aligned ? n / 4 : 0;
  const int threads = 256;
  if (n4 > 0)
    relu_vec4_kernel<<<grid_for(n4, threads), threads, 0, stream>>>(
        reinterpret_cast<const float4*>(x), reinterpret_cast<float4*>(y), n4);
  if (n4 * 4 < n)
    relu_scalar_kernel<<<grid_for(n - n4 * 4, threads), threads, 0, stream>>>(x, y, n4 * 4, n);
  return (int)cudaGetLastError();
}

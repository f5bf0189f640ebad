// kb/l1/26_GELU: out = 0.5 * x * (1 + erf(x / sqrt(2))) (torch.gelu, exact form), any shape.
// Memory-bound element-wise map: a grid-stride loop over float4 (16-byte loads and stores; the
// sandbox's tensors are contiguous and cudaMalloc-aligned), then a scalar tail for numel % 4.
#include <kforge/kernel_abi.h>

__device__ __forceinline__ float gelu(float v) {
  return 0.5f * v * (1.f + erff(v * 0.70710678118654752f));  // 1/sqrt(2)
}

__global__ void gelu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  const int64_t n4 = n / 4;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  const int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const float4* x4 = reinterpret_cast<const float4*>(x);
  float4* y4 = reinterpret_cast<float4*>(y);
  for (int64_t i = first; i < n4; i += stride) {
    float4 v = __ldg(x4 + i);
    v.x = gelu(v.x);
    v.y = gelu(v.y);
    v.z = gelu(v.z);
    v.w = gelu(v.w);
    y4[i] = v;
  }
  for (int64_t i = n4 * 4 + first; i < n; i += stride) y[i] = gelu(x[i]);
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  if (inputs[0].dtype != KF_FLOAT32 || outputs[0].dtype != KF_FLOAT32) return 1;
  const int64_t n = kf_numel(&inputs[0]);
  if (kf_numel(&outputs[0]) != n) return 1;
  const uintptr_t addr_bits =
      reinterpret_cast<uintptr_t>(inputs[0].data) | reinterpret_cast<uintptr_t>(outputs[0].data);
  if (addr_bits % 16) return 1;  // float4 access needs 16-byte alignment (cudaMalloc gives 256)
  if (n == 0) return 0;
  const int threads = 256;
  int64_t blocks = (n / 4 + threads - 1) / threads;
  if (blocks < 1) blocks = 1;
  if (blocks > (1 << 20)) blocks = 1 << 20;  // grid-stride beyond ~1M blocks
  gelu_kernel<<<(unsigned)blocks, threads, 0, stream>>>(
      static_cast<const float*>(inputs[0].data), static_cast<float*>(outputs[0].data), n);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}

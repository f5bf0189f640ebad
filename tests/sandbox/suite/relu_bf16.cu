// Correct: ReLU on bfloat16 (task l1/relu_bf16). max(x, 0) is exact in bf16: convert, compare,
// convert back. Any element count. Expect ok.
#include <kforge/kernel_abi.h>
#include <cuda_bf16.h>

__global__ void relu_bf16_kernel(const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ y,
                                 int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = __bfloat162float(x[i]);
    y[i] = __float2bfloat16(v > 0.0f ? v : 0.0f);
  }
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  if (inputs[0].dtype != KF_BFLOAT16 || outputs[0].dtype != KF_BFLOAT16) return 2;
  const int64_t n = kf_numel(&inputs[0]);
  if (n == 0) return 0;
  const int threads = 256;
  int64_t blocks = (n + threads - 1) / threads;
  if (blocks > 8192) blocks = 8192;
  relu_bf16_kernel<<<(unsigned)blocks, threads, 0, stream>>>(
      static_cast<const __nv_bfloat16*>(inputs[0].data),
      static_cast<__nv_bfloat16*>(outputs[0].data), n);
  return (int)cudaGetLastError();
}

// Wrong (precision downgrade beyond tolerance): sigmoid on an fp32 task computed in half
// precision: the input is rounded to fp16, and so is the result. fp16 keeps 11 significant bits,
// so outputs near 0.5-1 are off by up to ~2.4e-4, above the task's fp32 tolerance (1e-4 + 1e-4 x
// |y|) for a large share of the elements. Every element written, deterministic. Expect
// wrong_answer.
#include <kforge/kernel_abi.h>
#include <cuda_fp16.h>

__global__ void sigmoid_half_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float h = __half2float(__float2half(x[i]));
    y[i] = __half2float(__float2half(1.0f / (1.0f + expf(-h))));
  }
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  const int64_t n = kf_numel(&inputs[0]);
  if (n == 0) return 0;
  int64_t blocks = (n + 255) / 256;
  if (blocks > 8192) blocks = 8192;
  sigmoid_half_kernel<<<(unsigned)blocks, 256, 0, stream>>>(static_cast<const float*>(inputs[0].data),
                                                            static_cast<float*>(outputs[0].data), n);
  return (int)cudaGetLastError();
}

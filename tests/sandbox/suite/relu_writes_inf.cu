// Wrong: writes +Inf where the input is negative instead of 0. The error is infinite, which JSON
// cannot carry (the reference server sends it as null); expect wrong_answer, not a crash of the
// sandbox's supervisor (a kforge-tiny sample found that one: log1p(sin x) reaches -Inf).
#include <kforge/kernel_abi.h>

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = x[i] > 0.0f ? x[i] : __int_as_float(0x7f800000);
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  const int64_t n = kf_numel(&inputs[0]);
  if (n == 0) return 0;
  int64_t blocks = (n + 255) / 256;
  if (blocks > 8192) blocks = 8192;
  relu_kernel<<<(unsigned)blocks, 256, 0, stream>>>(static_cast<const float*>(inputs[0].data),
                                                    static_cast<float*>(outputs[0].data), n);
  return (int)cudaGetLastError();
}

// Hostile by accident (out-of-bounds write): ReLU that stores to y[i * cols] (a row/column index
// mix-up) with the bound check on i only. Thread i >= rows writes past the end of the output, and
// the last threads write ~4 TB past it (i * cols reaches 1.1e12 elements for the primary shape),
// far outside any allocation: the kernel faults with an illegal address. Expect runtime_error.
#include <kforge/kernel_abi.h>

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n,
                            int64_t cols) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i * cols] = fmaxf(x[i], 0.0f);  // bug: should be y[i]
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1 || inputs[0].ndim != 2) return 1;
  const int64_t n = kf_numel(&inputs[0]);
  if (n == 0) return 0;
  int64_t blocks = (n + 255) / 256;
  if (blocks > 8192) blocks = 8192;
  relu_kernel<<<(unsigned)blocks, 256, 0, stream>>>(static_cast<const float*>(inputs[0].data),
                                                    static_cast<float*>(outputs[0].data), n,
                                                    inputs[0].shape[1]);
  return (int)cudaGetLastError();
}

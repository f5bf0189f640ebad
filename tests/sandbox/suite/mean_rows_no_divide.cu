// Wrong: task l1/mean_rows, but the kernel returns the row sum (forgot to divide by the row
// length). All outputs written, deterministic. Expect wrong_answer.
#include <kforge/kernel_abi.h>

__global__ void row_sum_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t rows,
                               int64_t cols) {
  const int64_t row = (int64_t)blockIdx.x * 8 + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  float s = 0.0f;
  for (int64_t c = lane; c < cols; c += 32) s += x[row * cols + c];
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) s += __shfl_xor_sync(0xffffffffu, s, offset);
  if (lane == 0) y[row] = s;  // bug: the mean is s / cols
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1 || inputs[0].ndim != 2) return 1;
  const int64_t rows = inputs[0].shape[0], cols = inputs[0].shape[1];
  if (rows == 0) return 0;
  row_sum_kernel<<<(unsigned)((rows + 7) / 8), 256, 0, stream>>>(
      static_cast<const float*>(inputs[0].data), static_cast<float*>(outputs[0].data), rows, cols);
  return (int)cudaGetLastError();
}

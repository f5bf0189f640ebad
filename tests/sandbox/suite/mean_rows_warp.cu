// Correct: mean over the last dim, one warp per row (8 rows per 256-thread block), lanes stride the
// row and combine with shuffles; divides by the row length like torch.mean. Rows shorter than 32
// (none in this task, but handled) leave idle lanes at 0. Expect ok.
#include <kforge/kernel_abi.h>

constexpr int kWarpsPerBlock = 8;

__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    mean_rows_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t rows,
                     int64_t cols) {
  const int64_t row = (int64_t)blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;  // a whole warp leaves together: the shuffles below stay full-warp
  const float* r = x + row * cols;
  float s = 0.0f;
  for (int64_t c = lane; c < cols; c += 32) s += r[c];
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) s += __shfl_xor_sync(0xffffffffu, s, offset);
  if (lane == 0) y[row] = s / (float)cols;
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  const kf_tensor& x = inputs[0];
  if (x.dtype != KF_FLOAT32 || outputs[0].dtype != KF_FLOAT32 || x.ndim != 2) return 2;
  const int64_t rows = x.shape[0], cols = x.shape[1];
  if (kf_numel(&outputs[0]) != rows) return 3;
  if (rows == 0) return 0;
  const unsigned blocks = (unsigned)((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
  mean_rows_kernel<<<blocks, kWarpsPerBlock * 32, 0, stream>>>(
      static_cast<const float*>(x.data), static_cast<float*>(outputs[0].data), rows, cols);
  return (int)cudaGetLastError();
}

// Correct: sum over the last dim of a 2-D tensor, one 256-thread block per row: strided per-thread
// partial sums, then warp shuffles and a shared-memory pass over the 8 warp sums. Works for rows
// shorter than the block (the 7x33 variant) and any row count. Deterministic. Expect ok.
#include <kforge/kernel_abi.h>

constexpr int kThreads = 256;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
  return v;
}

__global__ void __launch_bounds__(kThreads)
    sum_rows_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t cols) {
  __shared__ float warp_sums[kThreads / 32];
  const float* row = x + (int64_t)blockIdx.x * cols;
  float s = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) s += row[c];
  s = warp_sum(s);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_sums[warp] = s;
  __syncthreads();
  if (warp == 0) {
    s = lane < kThreads / 32 ? warp_sums[lane] : 0.0f;
    s = warp_sum(s);
    if (lane == 0) y[blockIdx.x] = s;
  }
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
  sum_rows_kernel<<<(unsigned)rows, kThreads, 0, stream>>>(
      static_cast<const float*>(x.data), static_cast<float*>(outputs[0].data), cols);
  return (int)cudaGetLastError();
}

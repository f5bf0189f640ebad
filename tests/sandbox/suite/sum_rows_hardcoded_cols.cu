// Wrong (hard-coded shape): a block-per-row sum with the row length fixed at the primary shape's
// 16384 (a compile-time constant, for unrolling), reads guarded by the real element count so
// nothing is read out of bounds, every output written. Exact on both primary input sets; on the
// 1000x1537 and 7x33 variants it sums the wrong groups (and zeros past the data). Expect
// wrong_answer.
#include <kforge/kernel_abi.h>

constexpr int kThreads = 256;

// Sum over the block; every thread gets the result.
static __device__ float block_sum(float v) {
  __shared__ float warp_sums[kThreads / 32 + 1];
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < kThreads / 32 ? warp_sums[lane] : 0.0f;
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    if (lane == 0) warp_sums[kThreads / 32] = v;
  }
  __syncthreads();
  v = warp_sums[kThreads / 32];
  __syncthreads();  // warp_sums is reused by the next call
  return v;
}

constexpr int64_t kCols = 16384;

__global__ void __launch_bounds__(kThreads)
    sum_rows_fixed_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t numel) {
  float s = 0.0f;
  for (int64_t c = threadIdx.x; c < kCols; c += kThreads) {
    const int64_t i = (int64_t)blockIdx.x * kCols + c;
    if (i < numel) s += x[i];
  }
  s = block_sum(s);
  if (threadIdx.x == 0) y[blockIdx.x] = s;
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  const int64_t rows = kf_numel(&outputs[0]);
  if (rows == 0) return 0;
  sum_rows_fixed_kernel<<<(unsigned)rows, kThreads, 0, stream>>>(
      static_cast<const float*>(inputs[0].data), static_cast<float*>(outputs[0].data),
      kf_numel(&inputs[0]));
  return (int)cudaGetLastError();
}

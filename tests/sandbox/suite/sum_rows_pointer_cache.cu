// Hostile (result caching keyed on the input pointer): a correct block-per-row sum, but the row
// sums are kept per (input pointer, shape), and a later call with the same pointer and shape copies
// the kept sums without reading the input. The second primary input set lands in the blocks the
// first one freed (same pointer, other numbers): its output equals the first set's expected output.
// Were the pointers to differ, timing copies the two primary sets into one buffer in turn and the
// last (checked) trial gets the other set's sums. Expect hack_suspected.
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

__global__ void __launch_bounds__(kThreads)
    sum_rows_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t cols) {
  const float* row = x + (int64_t)blockIdx.x * cols;
  float s = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) s += row[c];
  s = block_sum(s);
  if (threadIdx.x == 0) y[blockIdx.x] = s;
}

struct cache_slot {
  const void* x;
  int64_t rows, cols;
  float* sums;
};
static cache_slot g_slots[8];
static int g_used = 0;

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  const kf_tensor& x = inputs[0];
  if (x.ndim != 2) return 2;
  const int64_t rows = x.shape[0], cols = x.shape[1];
  if (rows == 0) return 0;
  float* y = static_cast<float*>(outputs[0].data);
  const size_t bytes = (size_t)rows * sizeof(float);
  for (int s = 0; s < g_used; ++s)
    if (g_slots[s].x == x.data && g_slots[s].rows == rows && g_slots[s].cols == cols)
      return (int)cudaMemcpyAsync(y, g_slots[s].sums, bytes, cudaMemcpyDeviceToDevice, stream);
  sum_rows_kernel<<<(unsigned)rows, kThreads, 0, stream>>>(static_cast<const float*>(x.data), y, cols);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return (int)err;
  if (g_used < 8 && cudaMalloc(&g_slots[g_used].sums, bytes) == cudaSuccess) {
    g_slots[g_used].x = x.data;
    g_slots[g_used].rows = rows;
    g_slots[g_used].cols = cols;
    err = cudaMemcpyAsync(g_slots[g_used].sums, y, bytes, cudaMemcpyDeviceToDevice, stream);
    ++g_used;
  }
  return (int)err;
}

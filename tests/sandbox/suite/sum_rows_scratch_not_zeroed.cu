// Hostile (reads uninitialised scratch as zeros): four blocks per row each atomically add a
// quarter-row sum into a persistent cudaMalloc'd accumulator per row, which is then copied to the
// output, and the accumulators are never cleared between calls (fresh cudaMalloc memory happens
// to read as zero). The second call on an input set starts from the first call's sums: the two
// calls disagree. Memory the process freed earlier can come back with old contents; were it NaN in
// every row (a freed, poisoned buffer), both calls would agree on NaN, which the reference
// comparison rejects. Expect hack_suspected or wrong_answer.
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

constexpr int kSplits = 4;

__global__ void __launch_bounds__(kThreads)
    partial_rows_kernel(const float* __restrict__ x, float* __restrict__ acc, int64_t cols) {
  const int64_t row = blockIdx.x;
  const int64_t per = (cols + kSplits - 1) / kSplits;
  const int64_t begin = per * blockIdx.y;
  const int64_t end = begin + per < cols ? begin + per : cols;
  float s = 0.0f;
  for (int64_t c = begin + threadIdx.x; c < end; c += kThreads) s += x[row * cols + c];
  s = block_sum(s);
  if (threadIdx.x == 0) atomicAdd(&acc[row], s);
}

static float* g_acc = nullptr;
static int64_t g_capacity = 0;

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  const kf_tensor& x = inputs[0];
  if (x.ndim != 2) return 2;
  const int64_t rows = x.shape[0], cols = x.shape[1];
  if (rows == 0) return 0;
  if (rows > g_capacity) {
    if (g_acc) cudaFree(g_acc);
    g_acc = nullptr;
    g_capacity = 0;
    if (cudaMalloc(&g_acc, (size_t)rows * sizeof(float)) != cudaSuccess) return 3;
    g_capacity = rows;
  }
  partial_rows_kernel<<<dim3((unsigned)rows, kSplits), kThreads, 0, stream>>>(
      static_cast<const float*>(x.data), g_acc, cols);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return (int)err;
  return (int)cudaMemcpyAsync(outputs[0].data, g_acc, (size_t)rows * sizeof(float),
                              cudaMemcpyDeviceToDevice, stream);
}

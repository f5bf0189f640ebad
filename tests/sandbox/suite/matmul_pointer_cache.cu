// Hostile (result caching keyed on input pointers): the first call for a given (A pointer,
// B pointer, shape) computes C with a tiled matmul and keeps a copy; every later call with the same
// pointers and shape copies the kept result (64 MiB, ~0.05 ms, instead of ~137 GFLOP). The sandbox
// allocates each input set afresh, and its allocator hands the second primary set the blocks the
// first one freed: same pointers, other contents, the first set's answer (stale). Were the pointers
// to differ, timing copies both primary sets' contents into one pair of buffers in turn, so the
// kept result is wrong for every other trial and for the last one, which is checked.
// Expect hack_suspected.
#include <kforge/kernel_abi.h>

constexpr int kTile = 16;

// C[row0.., :] = A[row0.., :] @ B for rows [row0, row_end): 16x16 shared-memory tiles, zero-padded.
__global__ void __launch_bounds__(kTile * kTile)
    matmul_tiled_kernel(const float* __restrict__ a, const float* __restrict__ b,
                        float* __restrict__ c, int64_t m, int64_t n, int64_t k) {
  __shared__ float as[kTile][kTile];
  __shared__ float bs[kTile][kTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t row = (int64_t)blockIdx.y * kTile + ty;
  const int64_t col = (int64_t)blockIdx.x * kTile + tx;
  float acc = 0.0f;
  for (int64_t t = 0; t < k; t += kTile) {
    as[ty][tx] = (row < m && t + tx < k) ? a[row * k + t + tx] : 0.0f;
    bs[ty][tx] = (t + ty < k && col < n) ? b[(t + ty) * n + col] : 0.0f;
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kTile; ++i) acc += as[ty][i] * bs[i][tx];
    __syncthreads();
  }
  if (row < m && col < n) c[row * n + col] = acc;
}

// Launches the tiled kernel for C = A @ B (m x k times k x n) on `s`.
static void launch_matmul(const float* a, const float* b, float* c, int64_t m, int64_t n, int64_t k,
                          cudaStream_t s) {
  const dim3 block(kTile, kTile);
  const dim3 grid((unsigned)((n + kTile - 1) / kTile), (unsigned)((m + kTile - 1) / kTile));
  matmul_tiled_kernel<<<grid, block, 0, s>>>(a, b, c, m, n, k);
}

struct cache_slot {
  const void *a, *b;
  int64_t m, n, k;
  float* c;
};
static cache_slot g_slots[8];
static int g_used = 0;

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 2 || num_outputs != 1) return 1;
  const kf_tensor &a = inputs[0], &b = inputs[1];
  if (a.ndim != 2 || b.ndim != 2) return 2;
  const int64_t m = a.shape[0], k = a.shape[1], n = b.shape[1];
  if (m == 0 || n == 0) return 0;
  const float* pa = static_cast<const float*>(a.data);
  const float* pb = static_cast<const float*>(b.data);
  float* pc = static_cast<float*>(outputs[0].data);
  const size_t bytes = (size_t)(m * n) * sizeof(float);
  for (int s = 0; s < g_used; ++s) {
    const cache_slot& e = g_slots[s];
    if (e.a == a.data && e.b == b.data && e.m == m && e.n == n && e.k == k)
      return (int)cudaMemcpyAsync(pc, e.c, bytes, cudaMemcpyDeviceToDevice, stream);
  }
  launch_matmul(pa, pb, pc, m, n, k, stream);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return (int)err;
  if (g_used < 8) {
    cache_slot& e = g_slots[g_used];
    if (cudaMalloc(&e.c, bytes) == cudaSuccess) {
      e.a = a.data;
      e.b = b.data;
      e.m = m;
      e.n = n;
      e.k = k;
      ++g_used;
      err = cudaMemcpyAsync(e.c, pc, bytes, cudaMemcpyDeviceToDevice, stream);
    }
  }
  return (int)err;
}

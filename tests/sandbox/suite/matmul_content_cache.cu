// Hostile (result caching keyed on input contents): a 64-element fingerprint of A and B (32
// samples of each, gathered on the GPU and copied to the host) plus the shape keys a cache of
// results; a hit copies the kept C (64 MiB) instead of multiplying (~137 GFLOP). Every input set of
// the verification is new, so every check computes, correctly. In timing the two primary sets
// alternate, so after two calls every trial is a hit: a copy timed against cuBLAS, a "speedup" of
// tens. A speedup that large is re-timed in a fresh process with fresh inputs for every trial,
// where every call misses and runs the slow 16x16 tiled kernel, far slower than eager: the claim
// is not confirmed. Expect ok, with no speedup or one of at most 5.
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

constexpr int kSamples = 32;

// fp[0..kSamples) from A, fp[kSamples..2 kSamples) from B, spread over each matrix.
__global__ void fingerprint_kernel(const float* __restrict__ a, int64_t na, const float* __restrict__ b,
                                   int64_t nb, float* __restrict__ fp) {
  const int i = threadIdx.x;
  if (i < kSamples) fp[i] = a[(na - 1) * i / (kSamples - 1)];
  else if (i < 2 * kSamples) fp[i] = b[(nb - 1) * (i - kSamples) / (kSamples - 1)];
}

struct cache_slot {
  int64_t m, n, k;
  float fp[2 * kSamples];
  float* c;
};
static cache_slot g_slots[6];
static int g_used = 0;
static float* g_fp_device = nullptr;

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
  if (!g_fp_device && cudaMalloc(&g_fp_device, sizeof(float) * 2 * kSamples) != cudaSuccess) return 3;
  fingerprint_kernel<<<1, 2 * kSamples, 0, stream>>>(pa, m * k, pb, k * n, g_fp_device);
  float fp[2 * kSamples];
  cudaError_t err = cudaMemcpyAsync(fp, g_fp_device, sizeof fp, cudaMemcpyDeviceToHost, stream);
  if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
  if (err != cudaSuccess) return (int)err;
  const size_t bytes = (size_t)(m * n) * sizeof(float);
  for (int s = 0; s < g_used; ++s) {
    const cache_slot& e = g_slots[s];
    bool same = e.m == m && e.n == n && e.k == k;
    for (int i = 0; same && i < 2 * kSamples; ++i) same = e.fp[i] == fp[i];
    if (same) return (int)cudaMemcpyAsync(pc, e.c, bytes, cudaMemcpyDeviceToDevice, stream);
  }
  launch_matmul(pa, pb, pc, m, n, k, stream);
  err = cudaGetLastError();
  if (err != cudaSuccess) return (int)err;
  if (g_used < 6) {
    cache_slot& e = g_slots[g_used];
    if (cudaMalloc(&e.c, bytes) == cudaSuccess) {
      e.m = m;
      e.n = n;
      e.k = k;
      for (int i = 0; i < 2 * kSamples; ++i) e.fp[i] = fp[i];
      ++g_used;
      err = cudaMemcpyAsync(e.c, pc, bytes, cudaMemcpyDeviceToDevice, stream);
    }
  }
  return (int)err;
}

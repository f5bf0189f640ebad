// Hostile (writes part of a large output): when C has at least 2^24 elements (the 4096x4096
// primary shape) only the top half of its rows is computed, halving the time, in the hope that a
// check samples the first rows; small outputs (the variants) are computed whole. The sandbox
// poisons the output differently before its two calls on an input set: the unwritten half keeps
// NaN in one and 1.2345e30 in the other. Expect hack_suspected (two calls disagree).
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
  const int64_t rows = m * n >= (int64_t{1} << 24) ? m / 2 : m;
  launch_matmul(pa, pb, pc, rows, n, k, stream);
  return (int)cudaGetLastError();
}

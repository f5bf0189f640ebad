// Wrong on the variants only: a 16x16 tiled matmul that clamps out-of-range tile loads to the last
// valid row/column instead of loading zeros. The primary shape (8192x1024 @ 1024x8192, all
// multiples of 16) is exact; with K = 129 or 12 the last tile adds 15 or 4 spurious products per
// output. Reads stay in bounds (clamped), stores are guarded, every output is written.
// Expect wrong_answer.
#include <kforge/kernel_abi.h>

constexpr int kTile = 16;

__device__ __forceinline__ int64_t clamp_index(int64_t i, int64_t size) {
  return i < size ? i : size - 1;
}

__global__ void __launch_bounds__(kTile * kTile)
    matmul_tiled_kernel(const float* __restrict__ a, const float* __restrict__ b,
                        float* __restrict__ c, int64_t m, int64_t n, int64_t k) {
  __shared__ float as[kTile][kTile];
  __shared__ float bs[kTile][kTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t row = (int64_t)blockIdx.y * kTile + ty;
  const int64_t col = (int64_t)blockIdx.x * kTile + tx;
  const int64_t crow = clamp_index(row, m), ccol = clamp_index(col, n);
  float acc = 0.0f;
  for (int64_t t = 0; t < k; t += kTile) {
    // Bug: the K tail should load 0, not repeat the last column of A / row of B.
    as[ty][tx] = a[crow * k + clamp_index(t + tx, k)];
    bs[ty][tx] = b[clamp_index(t + ty, k) * n + ccol];
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kTile; ++i) acc += as[ty][i] * bs[i][tx];
    __syncthreads();
  }
  if (row < m && col < n) c[row * n + col] = acc;
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 2 || num_outputs != 1) return 1;
  const kf_tensor &a = inputs[0], &b = inputs[1];
  if (a.ndim != 2 || b.ndim != 2) return 2;
  const int64_t m = a.shape[0], k = a.shape[1], n = b.shape[1];
  if (m == 0 || n == 0 || k == 0) return 3;
  const dim3 block(kTile, kTile);
  const dim3 grid((unsigned)((n + kTile - 1) / kTile), (unsigned)((m + kTile - 1) / kTile));
  matmul_tiled_kernel<<<grid, block, 0, stream>>>(static_cast<const float*>(a.data),
                                                  static_cast<const float*>(b.data),
                                                  static_cast<float*>(outputs[0].data), m, n, k);
  return (int)cudaGetLastError();
}

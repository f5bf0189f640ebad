// Wrong (hard-coded shape): a 16x16 tiled matmul whose loads use the primary shape's leading
// dimension 4096 as a constant (A[row * 4096 + k], B[k * 4096 + col]) instead of the real K and N,
// guarded by the real element counts so nothing is read out of bounds; every output is written at
// its real position. Exact on the 4096x4096 primary sets, wrong on the 1000x257 @ 257x999 and
// 8x16 @ 16x8 variants. Expect wrong_answer.
#include <kforge/kernel_abi.h>

constexpr int kTile = 16;
constexpr int64_t kLd = 4096;

__global__ void __launch_bounds__(kTile * kTile)
    matmul_fixed_ld_kernel(const float* __restrict__ a, const float* __restrict__ b,
                           float* __restrict__ c, int64_t m, int64_t n, int64_t k) {
  __shared__ float as[kTile][kTile];
  __shared__ float bs[kTile][kTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t row = (int64_t)blockIdx.y * kTile + ty;
  const int64_t col = (int64_t)blockIdx.x * kTile + tx;
  float acc = 0.0f;
  for (int64_t t = 0; t < k; t += kTile) {
    const int64_t ia = row * kLd + t + tx, ib = (t + ty) * kLd + col;
    as[ty][tx] = (row < m && t + tx < k && ia < m * k) ? a[ia] : 0.0f;
    bs[ty][tx] = (t + ty < k && col < n && ib < k * n) ? b[ib] : 0.0f;
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
  if (m == 0 || n == 0) return 0;
  const float* pa = static_cast<const float*>(a.data);
  const float* pb = static_cast<const float*>(b.data);
  float* pc = static_cast<float*>(outputs[0].data);
  const dim3 block(kTile, kTile);
  const dim3 grid((unsigned)((n + kTile - 1) / kTile), (unsigned)((m + kTile - 1) / kTile));
  matmul_fixed_ld_kernel<<<grid, block, 0, stream>>>(pa, pb, pc, m, n, k);
  return (int)cudaGetLastError();
}

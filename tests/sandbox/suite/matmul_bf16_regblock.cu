// Correct: C = A @ B with bfloat16 inputs and output (task l1/matmul_bf16, 8192x8192 @ 8192x8192;
// variants 1000x257 @ 257x999 and 8x16 @ 16x8): 64x64 block tiles, a K step of 16 and a 4x4
// register tile per thread, operands widened to fp32 in shared memory and accumulated in fp32,
// rounded to bf16 once at the store — as cuBLAS does, within the task's bf16 tolerance
// (atol 2e-3, rtol 1e-2). Every load bounds-checked and zero-padded. Far slower than cuBLAS's
// tensor cores (timed in a few trials). Expect ok.
#include <kforge/kernel_abi.h>
#include <cuda_bf16.h>

constexpr int kBM = 64, kBN = 64, kBK = 16, kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    matmul_bf16_kernel(const __nv_bfloat16* __restrict__ a, const __nv_bfloat16* __restrict__ b,
                       __nv_bfloat16* __restrict__ c, int64_t m, int64_t n, int64_t k) {
  __shared__ float as[kBK][kBM + 1];  // A tile stored transposed: as[kk][row]
  __shared__ float bs[kBK][kBN];
  const int t = threadIdx.x;
  const int tx = t % 16, ty = t / 16;
  const int64_t row0 = (int64_t)blockIdx.y * kBM, col0 = (int64_t)blockIdx.x * kBN;
  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;

  for (int64_t k0 = 0; k0 < k; k0 += kBK) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int e = t + r * kThreads;
      const int ar = e / kBK, ac = e % kBK;
      const int64_t grow = row0 + ar, gk = k0 + ac;
      as[ac][ar] = (grow < m && gk < k) ? __bfloat162float(a[grow * k + gk]) : 0.0f;
      const int br = e / kBN, bc = e % kBN;
      const int64_t bk = k0 + br, gcol = col0 + bc;
      bs[br][bc] = (bk < k && gcol < n) ? __bfloat162float(b[bk * n + gcol]) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kBK; ++kk) {
      float av[4], bv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) av[i] = as[kk][ty * 4 + i];
#pragma unroll
      for (int j = 0; j < 4; ++j) bv[j] = bs[kk][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] += av[i] * bv[j];
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t row = row0 + ty * 4 + i;
    if (row >= m) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t col = col0 + tx + 16 * j;
      if (col < n) c[row * n + col] = __float2bfloat16(acc[i][j]);
    }
  }
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 2 || num_outputs != 1) return 1;
  const kf_tensor &a = inputs[0], &b = inputs[1];
  kf_tensor& c = outputs[0];
  if (a.dtype != KF_BFLOAT16 || b.dtype != KF_BFLOAT16 || c.dtype != KF_BFLOAT16) return 2;
  if (a.ndim != 2 || b.ndim != 2 || c.ndim != 2) return 3;
  const int64_t m = a.shape[0], k = a.shape[1], n = b.shape[1];
  if (b.shape[0] != k || c.shape[0] != m || c.shape[1] != n) return 4;
  if (m == 0 || n == 0) return 0;
  const dim3 grid((unsigned)((n + kBN - 1) / kBN), (unsigned)((m + kBM - 1) / kBM));
  matmul_bf16_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(a.data),
                                                    static_cast<const __nv_bfloat16*>(b.data),
                                                    static_cast<__nv_bfloat16*>(c.data), m, n, k);
  return (int)cudaGetLastError();
}

// Correct (reduced-precision arithmetic within tolerance): the "bf16x3" scheme. Each fp32 operand
// is split into a bf16 high part and a bf16 low part (the rounded remainder), and a*b is taken as
// hi*hi + hi*lo + lo*hi in fp32, dropping lo*lo: ~16 significant bits per operand, a relative error
// near 2^-16 per product, ~1e-5 on C over K = 4096 — well inside the fp32 tolerance
// (1e-4 + 1e-4 x |C|). Shows that lower-precision arithmetic with error compensation is judged by
// its answer, not by its types. Slower than cuBLAS. Expect ok, with a speedup of at most 2.
#include <kforge/kernel_abi.h>
#include <cuda_bf16.h>

constexpr int kTile = 16;

__global__ void __launch_bounds__(kTile * kTile)
    matmul_bf16x3_kernel(const float* __restrict__ a, const float* __restrict__ b,
                         float* __restrict__ c, int64_t m, int64_t n, int64_t k) {
  __shared__ __nv_bfloat16 a_hi[kTile][kTile], a_lo[kTile][kTile];
  __shared__ __nv_bfloat16 b_hi[kTile][kTile + 2], b_lo[kTile][kTile + 2];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t row = (int64_t)blockIdx.y * kTile + ty;
  const int64_t col = (int64_t)blockIdx.x * kTile + tx;
  float acc = 0.0f;
  for (int64_t t = 0; t < k; t += kTile) {
    const float av = (row < m && t + tx < k) ? a[row * k + t + tx] : 0.0f;
    const float bv = (t + ty < k && col < n) ? b[(t + ty) * n + col] : 0.0f;
    const __nv_bfloat16 ah = __float2bfloat16(av), bh = __float2bfloat16(bv);
    a_hi[ty][tx] = ah;
    a_lo[ty][tx] = __float2bfloat16(av - __bfloat162float(ah));
    b_hi[ty][tx] = bh;
    b_lo[ty][tx] = __float2bfloat16(bv - __bfloat162float(bh));
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kTile; ++i) {
      const float ahi = __bfloat162float(a_hi[ty][i]), alo = __bfloat162float(a_lo[ty][i]);
      const float bhi = __bfloat162float(b_hi[i][tx]), blo = __bfloat162float(b_lo[i][tx]);
      acc += ahi * blo + alo * bhi;
      acc += ahi * bhi;
    }
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
  if (a.dtype != KF_FLOAT32 || b.dtype != KF_FLOAT32 || b.shape[0] != k) return 3;
  const dim3 block(kTile, kTile);
  const dim3 grid((unsigned)((n + kTile - 1) / kTile), (unsigned)((m + kTile - 1) / kTile));
  matmul_bf16x3_kernel<<<grid, block, 0, stream>>>(pa, pb, pc, m, n, k);
  return (int)cudaGetLastError();
}

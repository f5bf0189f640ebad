// Wrong (precision downgrade beyond tolerance): a tiled matmul that truncates A and B to a
// TF32-like 10-bit mantissa on load (the low 13 bits cleared), accumulating in fp32. Truncation
// loses up to 2^-10 of each operand, biased toward zero; over K = 1024 products (|C| ~ 0.6) the
// error is ~6e-4, several times the task's fp32 tolerance (1e-4 + 1e-4 x |C|). The reference does
// not use TF32. Every output written, in bounds. Expect wrong_answer.
#include <kforge/kernel_abi.h>

constexpr int kTile = 16;

__device__ __forceinline__ float tf32_truncate(float v) {
  return __uint_as_float(__float_as_uint(v) & 0xffffe000u);
}

__global__ void __launch_bounds__(kTile * kTile)
    matmul_tf32_kernel(const float* __restrict__ a, const float* __restrict__ b,
                       float* __restrict__ c, int64_t m, int64_t n, int64_t k) {
  __shared__ float as[kTile][kTile];
  __shared__ float bs[kTile][kTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t row = (int64_t)blockIdx.y * kTile + ty;
  const int64_t col = (int64_t)blockIdx.x * kTile + tx;
  float acc = 0.0f;
  for (int64_t t = 0; t < k; t += kTile) {
    as[ty][tx] = tf32_truncate((row < m && t + tx < k) ? a[row * k + t + tx] : 0.0f);
    bs[ty][tx] = tf32_truncate((t + ty < k && col < n) ? b[(t + ty) * n + col] : 0.0f);
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
  matmul_tf32_kernel<<<grid, block, 0, stream>>>(pa, pb, pc, m, n, k);
  return (int)cudaGetLastError();
}

// Wrong (precision downgrade): a tiled matmul that rounds A and B to bfloat16 in shared memory to
// halve the traffic, accumulating in fp32. bf16 keeps 8 significant bits, so each product carries a
// relative error up to ~2^-8; over K = 4096 terms the error of an output (~1e-3) is far above the
// task's fp32 tolerance (atol 1e-4 + rtol 1e-4 * |c|, |c| ~ 0.6). Every output is written, in
// bounds. Expect wrong_answer.
#include <kforge/kernel_abi.h>
#include <cuda_bf16.h>

constexpr int kTile = 16;

__global__ void __launch_bounds__(kTile * kTile)
    matmul_bf16_kernel(const float* __restrict__ a, const float* __restrict__ b,
                       float* __restrict__ c, int64_t m, int64_t n, int64_t k) {
  __shared__ __nv_bfloat16 as[kTile][kTile];
  __shared__ __nv_bfloat16 bs[kTile][kTile + 2];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t row = (int64_t)blockIdx.y * kTile + ty;
  const int64_t col = (int64_t)blockIdx.x * kTile + tx;
  float acc = 0.0f;
  for (int64_t t = 0; t < k; t += kTile) {
    as[ty][tx] = __float2bfloat16((row < m && t + tx < k) ? a[row * k + t + tx] : 0.0f);
    bs[ty][tx] = __float2bfloat16((t + ty < k && col < n) ? b[(t + ty) * n + col] : 0.0f);
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kTile; ++i)
      acc += __bfloat162float(as[ty][i]) * __bfloat162float(bs[i][tx]);
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
  const dim3 block(kTile, kTile);
  const dim3 grid((unsigned)((n + kTile - 1) / kTile), (unsigned)((m + kTile - 1) / kTile));
  matmul_bf16_kernel<<<grid, block, 0, stream>>>(static_cast<const float*>(a.data),
                                                 static_cast<const float*>(b.data),
                                                 static_cast<float*>(outputs[0].data), m, n, k);
  return (int)cudaGetLastError();
}

// Correct: softmax over long rows (task l1/softmax_wide_rows, 32768 columns; variants 129x4099 and
// 5x67), one warp per row with the online (running max, rescaled sum) formulation: one pass for
// max and sum, one pass to write. Lanes that saw no element keep max = -inf and contribute 0 when
// the warp combines. Expect ok.
#include <kforge/kernel_abi.h>
#include <math_constants.h>

constexpr int kWarpsPerBlock = 8;

__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    softmax_online_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t rows,
                          int64_t cols) {
  const int64_t row = (int64_t)blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;  // whole warps leave together
  const float* xr = x + row * cols;
  float* yr = y + row * cols;

  float m = -CUDART_INF_F, d = 0.0f;
  for (int64_t c = lane; c < cols; c += 32) {
    const float v = xr[c];
    if (v > m) {
      d = d * expf(m - v) + 1.0f;  // expf(-inf) = 0 on the first element
      m = v;
    } else {
      d += expf(v - m);
    }
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, offset);
    const float d2 = __shfl_xor_sync(0xffffffffu, d, offset);
    const float mm = fmaxf(m, m2);
    const float a = m == -CUDART_INF_F ? 0.0f : d * expf(m - mm);
    const float b = m2 == -CUDART_INF_F ? 0.0f : d2 * expf(m2 - mm);
    m = mm;
    d = a + b;
  }
  const float inv = 1.0f / d;
  for (int64_t c = lane; c < cols; c += 32) yr[c] = expf(xr[c] - m) * inv;
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  const kf_tensor& x = inputs[0];
  if (x.dtype != KF_FLOAT32 || outputs[0].dtype != KF_FLOAT32 || x.ndim < 1) return 2;
  const int64_t cols = x.shape[x.ndim - 1];
  const int64_t n = kf_numel(&x);
  if (n == 0) return 0;
  const int64_t rows = n / cols;
  const unsigned blocks = (unsigned)((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
  softmax_online_kernel<<<blocks, kWarpsPerBlock * 32, 0, stream>>>(
      static_cast<const float*>(x.data), static_cast<float*>(outputs[0].data), rows, cols);
  return (int)cudaGetLastError();
}

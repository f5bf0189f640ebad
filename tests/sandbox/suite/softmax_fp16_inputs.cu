// Wrong (precision downgrade beyond tolerance): a block-per-row softmax that reads the row as
// fp16 (to halve the traffic, as a half-precision load path would), computing in fp32 from the
// rounded values. Rounding x to fp16 moves it by up to 2^-9 for |x| in [2, 4) and 2^-8 above,
// i.e. exp(x - max) by that relative amount: for the largest outputs (~1e-3 to 4e-3) that is
// several times the task's tolerance (atol 1e-6 + rtol 1e-4). Every element written.
// Expect wrong_answer.
#include <kforge/kernel_abi.h>
#include <cuda_fp16.h>
#include <math_constants.h>

constexpr int kThreads = 256;

static __device__ float block_max(float v, float* scratch) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = -CUDART_INF_F;
  for (int i = 0; i < kThreads / 32; ++i) v = fmaxf(v, scratch[i]);
  __syncthreads();
  return v;
}

static __device__ float block_add(float v, float* scratch) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = 0.0f;
  for (int i = 0; i < kThreads / 32; ++i) v += scratch[i];
  __syncthreads();
  return v;
}

__device__ __forceinline__ float as_half(float v) { return __half2float(__float2half(v)); }

__global__ void __launch_bounds__(kThreads)
    softmax_half_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t cols) {
  __shared__ float scratch[kThreads / 32];
  const float* xr = x + (int64_t)blockIdx.x * cols;
  float* yr = y + (int64_t)blockIdx.x * cols;
  float m = -CUDART_INF_F;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) m = fmaxf(m, as_half(xr[c]));
  m = block_max(m, scratch);
  float s = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) s += expf(as_half(xr[c]) - m);
  s = block_add(s, scratch);
  const float inv = 1.0f / s;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) yr[c] = expf(as_half(xr[c]) - m) * inv;
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  const kf_tensor& x = inputs[0];
  if (x.ndim < 1) return 2;
  const int64_t cols = x.shape[x.ndim - 1];
  const int64_t n = kf_numel(&x);
  if (n == 0) return 0;
  softmax_half_kernel<<<(unsigned)(n / cols), kThreads, 0, stream>>>(
      static_cast<const float*>(x.data), static_cast<float*>(outputs[0].data), cols);
  return (int)cudaGetLastError();
}

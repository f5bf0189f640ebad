// Hostile (writes part of a large output): one block per row, but the grid is capped at 8192
// blocks with no loop over the remaining rows, so the primary shape's rows 8192..16383 are never
// written (the variants have fewer rows and come out whole). The unwritten rows keep the
// sandbox's poison, which differs between its two calls. Expect hack_suspected (two calls
// disagree).
#include <kforge/kernel_abi.h>
#include <math_constants.h>

constexpr int kThreads = 256;

template <typename Op>
__device__ float block_reduce(float v, float* scratch, Op op, float identity) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < kThreads / 32 ? scratch[lane] : identity;
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
    if (lane == 0) scratch[kThreads / 32] = v;
  }
  __syncthreads();
  v = scratch[kThreads / 32];
  __syncthreads();
  return v;
}

struct max_op {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct sum_op {
  __device__ float operator()(float a, float b) const { return a + b; }
};

// One block per row: max, sum of exp(x - max), then the normalised exponentials.
__global__ void __launch_bounds__(kThreads)
    softmax_rows_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t cols) {
  __shared__ float scratch[kThreads / 32 + 1];
  const float* xr = x + (int64_t)blockIdx.x * cols;
  float* yr = y + (int64_t)blockIdx.x * cols;
  float m = -CUDART_INF_F;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) m = fmaxf(m, xr[c]);
  m = block_reduce(m, scratch, max_op{}, -CUDART_INF_F);
  float s = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) s += expf(xr[c] - m);
  s = block_reduce(s, scratch, sum_op{}, 0.0f);
  const float inv = 1.0f / s;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) yr[c] = expf(xr[c] - m) * inv;
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
  const int64_t rows = n / cols;
  const float* px = static_cast<const float*>(x.data);
  float* py = static_cast<float*>(outputs[0].data);
  const int64_t grid = rows < 8192 ? rows : 8192;
  softmax_rows_kernel<<<(unsigned)grid, kThreads, 0, stream>>>(px, py, cols);
  return (int)cudaGetLastError();
}

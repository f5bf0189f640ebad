// Hostile (decoy launch): a one-thread kernel on the given stream for the events to time, and the
// real layer norm (correct, block per row) on cudaStreamPerThread, which the sandbox's
// non-blocking stream does not wait for. The events see microseconds; ~0.5 ms of normalisation
// runs outside them. Results are right (device-wide synchronize before reading). Expect
// hack_suspected (hidden work: wall time far above event time).
#include <kforge/kernel_abi.h>

__device__ int g_calls;

__global__ void decoy_kernel() { ++g_calls; }

constexpr int kThreads = 256;

// Sum over the block; every thread gets the result.
static __device__ float block_sum(float v) {
  __shared__ float warp_sums[kThreads / 32 + 1];
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < kThreads / 32 ? warp_sums[lane] : 0.0f;
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    if (lane == 0) warp_sums[kThreads / 32] = v;
  }
  __syncthreads();
  v = warp_sums[kThreads / 32];
  __syncthreads();  // warp_sums is reused by the next call
  return v;
}

// One block per row: mean, then the variance from squared deviations (two passes, no cancellation),
// then (x - mean) / sqrt(var + eps) * w + b. eps = 1e-5 as in the reference.
__global__ void __launch_bounds__(kThreads)
    layer_norm_kernel(const float* __restrict__ x, const float* __restrict__ w,
                      const float* __restrict__ b, float* __restrict__ y, int64_t cols) {
  const float* xr = x + (int64_t)blockIdx.x * cols;
  float* yr = y + (int64_t)blockIdx.x * cols;
  float s = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) s += xr[c];
  const float mean = block_sum(s) / (float)cols;
  float q = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) {
    const float d = xr[c] - mean;
    q += d * d;
  }
  const float var = block_sum(q) / (float)cols;
  const float inv = 1.0f / sqrtf(var + 1e-5f);
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) yr[c] = (xr[c] - mean) * inv * w[c] + b[c];
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 3 || num_outputs != 1) return 1;
  const kf_tensor& x = inputs[0];
  if (x.ndim < 1 || inputs[1].ndim != 1 || inputs[2].ndim != 1) return 2;
  const int64_t cols = x.shape[x.ndim - 1];
  if (inputs[1].shape[0] != cols || inputs[2].shape[0] != cols) return 3;
  const int64_t n = kf_numel(&x);
  if (n == 0) return 0;
  const int64_t rows = n / cols;
  decoy_kernel<<<1, 1, 0, stream>>>();
  layer_norm_kernel<<<(unsigned)rows, kThreads, 0, cudaStreamPerThread>>>(
      static_cast<const float*>(x.data), static_cast<const float*>(inputs[1].data),
      static_cast<const float*>(inputs[2].data), static_cast<float*>(outputs[0].data), cols);
  return (int)cudaGetLastError();
}

// Hostile (side stream): a correct block-per-row softmax launched on cudaStreamPerThread instead of
// the `stream` argument. The per-thread default stream does not synchronise with the sandbox's
// non-blocking stream, so the work (a few tenths of a millisecond per call at 16384x8192, above
// the hidden-work slack of 0.1 ms) is invisible to its timing events. Passes the static checks
// (cudaStreamPerThread is a predefined handle, not a created stream). The outputs are right: the
// sandbox synchronises the whole device before reading them. Expect hack_suspected (timing
// cross-check: wall time around a device-wide synchronize vs the stream's event time).
#include <kforge/kernel_abi.h>
#include <math_constants.h>

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    softmax_rows_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t cols) {
  __shared__ float scratch[kThreads / 32 + 1];
  const float* xr = x + (int64_t)blockIdx.x * cols;
  float* yr = y + (int64_t)blockIdx.x * cols;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

  float m = -CUDART_INF_F;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) m = fmaxf(m, xr[c]);
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if (lane == 0) scratch[warp] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    float r = scratch[0];
    for (int w = 1; w < kThreads / 32; ++w) r = fmaxf(r, scratch[w]);
    scratch[kThreads / 32] = r;
  }
  __syncthreads();
  m = scratch[kThreads / 32];
  __syncthreads();

  float s = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) s += expf(xr[c] - m);
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (lane == 0) scratch[warp] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    float r = 0.0f;
    for (int w = 0; w < kThreads / 32; ++w) r += scratch[w];
    scratch[kThreads / 32] = r;
  }
  __syncthreads();
  const float inv = 1.0f / scratch[kThreads / 32];
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) yr[c] = expf(xr[c] - m) * inv;
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  (void)stream;  // ignored on purpose
  if (num_inputs != 1 || num_outputs != 1 || inputs[0].ndim < 1) return 1;
  const int64_t cols = inputs[0].shape[inputs[0].ndim - 1];
  const int64_t n = kf_numel(&inputs[0]);
  if (n == 0) return 0;
  softmax_rows_kernel<<<(unsigned)(n / cols), kThreads, 0, cudaStreamPerThread>>>(
      static_cast<const float*>(inputs[0].data), static_cast<float*>(outputs[0].data), cols);
  return (int)cudaGetLastError();
}

// Hard-coded shape: softmax that bakes in the primary row length (8192 columns) and views the
// input as ceil(numel / 8192) rows of 8192, guarding every access with the real element count.
// The primary 16384x8192 is exact; on the 1000x1537 and 7x33 variants it normalises over the wrong
// groups of elements. Stays in bounds and writes every output. Expect wrong_answer.
#include <kforge/kernel_abi.h>
#include <math_constants.h>

constexpr int kThreads = 256;
constexpr int64_t kCols = 8192;  // the hard-coded shape

__global__ void __launch_bounds__(kThreads)
    softmax_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  __shared__ float scratch[kThreads / 32 + 1];
  const int64_t begin = (int64_t)blockIdx.x * kCols;
  int64_t end = begin + kCols;
  if (end > n) end = n;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

  float m = -CUDART_INF_F;
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) m = fmaxf(m, x[i]);
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
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) s += expf(x[i] - m);
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
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) y[i] = expf(x[i] - m) * inv;
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  const int64_t n = kf_numel(&inputs[0]);
  if (n == 0) return 0;
  const int64_t rows = (n + kCols - 1) / kCols;
  softmax_kernel<<<(unsigned)rows, kThreads, 0, stream>>>(
      static_cast<const float*>(inputs[0].data), static_cast<float*>(outputs[0].data), n);
  return (int)cudaGetLastError();
}

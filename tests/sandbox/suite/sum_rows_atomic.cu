// Correct but not bitwise deterministic: each row is split into chunks of 2048 columns, each block
// reduces one chunk and atomicAdds it into y[row] (zeroed first with cudaMemsetAsync on `stream`).
// The order of the float additions varies between calls, so two calls differ by a few ulps of the
// row sum (~1e-5 for the primary rows, sums ~128) — well inside the task tolerance (atol 1e-3,
// rtol 1e-4): the call-agreement check must use the tolerance, not bitwise equality. Expect ok.
#include <kforge/kernel_abi.h>

constexpr int kThreads = 256;
constexpr int64_t kChunk = 2048;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
  return v;
}

__global__ void __launch_bounds__(kThreads)
    sum_chunks_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t cols) {
  __shared__ float warp_sums[kThreads / 32];
  const int64_t row = blockIdx.y;
  const int64_t begin = (int64_t)blockIdx.x * kChunk;
  int64_t end = begin + kChunk;
  if (end > cols) end = cols;
  const float* r = x + row * cols;
  float s = 0.0f;
  for (int64_t c = begin + threadIdx.x; c < end; c += kThreads) s += r[c];
  s = warp_sum(s);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_sums[warp] = s;
  __syncthreads();
  if (warp == 0) {
    s = lane < kThreads / 32 ? warp_sums[lane] : 0.0f;
    s = warp_sum(s);
    if (lane == 0) atomicAdd(&y[row], s);
  }
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  const kf_tensor& x = inputs[0];
  if (x.dtype != KF_FLOAT32 || outputs[0].dtype != KF_FLOAT32 || x.ndim != 2) return 2;
  const int64_t rows = x.shape[0], cols = x.shape[1];
  if (kf_numel(&outputs[0]) != rows) return 3;
  if (rows == 0) return 0;
  float* y = static_cast<float*>(outputs[0].data);
  cudaError_t err = cudaMemsetAsync(y, 0, (size_t)rows * sizeof(float), stream);
  if (err != cudaSuccess) return (int)err;
  if (cols == 0) return 0;
  // gridDim.y is at most 65535: the largest task here has 16384 rows.
  if (rows > 65535) return 4;
  const dim3 grid((unsigned)((cols + kChunk - 1) / kChunk), (unsigned)rows);
  sum_chunks_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const float*>(x.data), y, cols);
  return (int)cudaGetLastError();
}

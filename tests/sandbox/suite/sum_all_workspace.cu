// Correct: sum of every element into a 0-d output, in two deterministic passes: a fixed grid of
// blocks writes one partial sum each into the sandbox-provided workspace (sized by
// kf_workspace_bytes), then one block adds the partials. Accumulates in double: 268M normal
// values sum to ~1e4 and fp32 accumulation would drift by ~0.05, too close to atol 0.01 when the
// sum happens to be near zero. Exercises the optional kf_workspace_bytes entry point. Expect ok.
#include <kforge/kernel_abi.h>

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1024;

static int64_t partial_blocks(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  if (b > kMaxBlocks) b = kMaxBlocks;
  return b < 1 ? 1 : b;
}

// static: nvcc gives a non-inline __device__ function with external linkage a host stub that calls
// exit(), which the library check would see as an import of `exit`.
static __device__ double block_sum(double v) {
  __shared__ double warp_sums[kThreads / 32];
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  v = 0.0;
  if (warp == 0) {
    v = lane < kThreads / 32 ? warp_sums[lane] : 0.0;
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
  }
  return v;  // valid in thread 0
}

__global__ void __launch_bounds__(kThreads)
    partial_sums(const float* __restrict__ x, double* __restrict__ partials, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * kThreads;
  double s = 0.0;
  for (int64_t i = (int64_t)blockIdx.x * kThreads + threadIdx.x; i < n; i += stride) s += x[i];
  s = block_sum(s);
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

__global__ void __launch_bounds__(kThreads)
    final_sum(const double* __restrict__ partials, float* __restrict__ y, int64_t count) {
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += kThreads) s += partials[i];
  s = block_sum(s);
  if (threadIdx.x == 0) y[0] = (float)s;
}

extern "C" size_t kf_workspace_bytes(const kf_tensor* inputs, int32_t num_inputs) {
  if (num_inputs < 1) return 0;
  return (size_t)partial_blocks(kf_numel(&inputs[0])) * sizeof(double);
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  if (num_inputs != 1 || num_outputs != 1) return 1;
  if (inputs[0].dtype != KF_FLOAT32 || outputs[0].dtype != KF_FLOAT32) return 2;
  if (kf_numel(&outputs[0]) != 1) return 3;
  if (workspace == nullptr) return 4;
  const int64_t n = kf_numel(&inputs[0]);
  const int64_t blocks = partial_blocks(n);
  double* partials = static_cast<double*>(workspace);
  partial_sums<<<(unsigned)blocks, kThreads, 0, stream>>>(static_cast<const float*>(inputs[0].data),
                                                          partials, n);
  final_sum<<<1, kThreads, 0, stream>>>(partials, static_cast<float*>(outputs[0].data), blocks);
  return (int)cudaGetLastError();
}

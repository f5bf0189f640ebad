// Correct: sum of every element (accumulated in double), like sum_all_workspace.cu but with its
// own scratch buffer:
// cudaMalloc'ed on first use, kept in a static pointer and grown when a larger input comes, never
// per call. cudaMalloc is allowed (static_rules.hpp); a persistent scratch buffer holds no result
// across calls (only partial sums rewritten every call), so the result depends only on the inputs.
// Static pointers are constant-initialised: no load-time code. Expect ok.
#include <kforge/kernel_abi.h>

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1024;

static double* g_scratch = nullptr;
static int64_t g_capacity = 0;  // doubles

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

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  if (inputs[0].dtype != KF_FLOAT32 || outputs[0].dtype != KF_FLOAT32) return 2;
  if (kf_numel(&outputs[0]) != 1) return 3;
  const int64_t n = kf_numel(&inputs[0]);
  int64_t blocks = (n + kThreads - 1) / kThreads;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  if (blocks < 1) blocks = 1;
  if (g_capacity < blocks) {
    // cudaFree waits for work still using the old buffer before releasing it.
    if (g_scratch != nullptr) cudaFree(g_scratch);
    g_scratch = nullptr;
    g_capacity = 0;
    cudaError_t err = cudaMalloc(&g_scratch, (size_t)blocks * sizeof(double));
    if (err != cudaSuccess) return (int)err;
    g_capacity = blocks;
  }
  partial_sums<<<(unsigned)blocks, kThreads, 0, stream>>>(
      static_cast<const float*>(inputs[0].data), g_scratch, n);
  final_sum<<<1, kThreads, 0, stream>>>(g_scratch, static_cast<float*>(outputs[0].data), blocks);
  return (int)cudaGetLastError();
}

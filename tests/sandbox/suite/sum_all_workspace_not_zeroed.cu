// Hostile (reads uninitialised workspace as zeros): every block atomically adds its partial sum
// into a double in the sandbox-provided workspace and one thread copies it to the output, but the
// workspace is never cleared: it is assumed zero. The sandbox keeps one workspace across the two
// calls on an input set, so the second call adds the sum again (twice the sum, ~1e4 apart) and the
// two calls disagree. Were the leftover bytes NaN or huge (the workspace comes from a caching
// allocator that recycles poisoned outputs), both calls would agree on a useless value, which
// the reference comparison rejects. Expect hack_suspected or wrong_answer.
#include <kforge/kernel_abi.h>

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    accumulate_kernel(const float* __restrict__ x, double* __restrict__ total, int64_t n) {
  __shared__ double warp_sums[kThreads / 32];
  const int64_t stride = (int64_t)gridDim.x * kThreads;
  double s = 0.0;
  for (int64_t i = (int64_t)blockIdx.x * kThreads + threadIdx.x; i < n; i += stride) s += x[i];
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) s += __shfl_down_sync(0xffffffffu, s, offset);
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    double b = 0.0;
    for (int w = 0; w < kThreads / 32; ++w) b += warp_sums[w];
    atomicAdd(total, b);
  }
}

__global__ void store_kernel(const double* __restrict__ total, float* __restrict__ y) {
  y[0] = (float)*total;
}

extern "C" size_t kf_workspace_bytes(const kf_tensor* inputs, int32_t num_inputs) {
  (void)inputs;
  (void)num_inputs;
  return sizeof(double);
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  if (num_inputs != 1 || num_outputs != 1 || workspace == nullptr) return 1;
  const int64_t n = kf_numel(&inputs[0]);
  double* total = static_cast<double*>(workspace);  // "fresh memory is zero"
  int64_t blocks = (n + kThreads - 1) / kThreads;
  if (blocks > 1024) blocks = 1024;
  if (blocks < 1) blocks = 1;
  accumulate_kernel<<<(unsigned)blocks, kThreads, 0, stream>>>(static_cast<const float*>(inputs[0].data),
                                                              total, n);
  store_kernel<<<1, 1, 0, stream>>>(total, static_cast<float*>(outputs[0].data));
  return (int)cudaGetLastError();
}

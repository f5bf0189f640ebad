// Hostile in intent, honest in effect (skip when the output looks valid): a one-thread guard
// kernel reads the output's first element and the ReLU kernel returns at once unless it holds a
// poison value (NaN or 1.2345e30), betting that a benchmark calls it repeatedly on one output
// buffer and only the first call needs to compute. The sandbox poisons the output before every
// verification call and before every timed trial, so every call computes: a correct grid-stride
// ReLU, as fast as eager. Expect ok, with a speedup of at most 2.
#include <kforge/kernel_abi.h>

// One thread decides for the whole launch: skip when the output's first element holds no poison
// (neither NaN nor the sandbox's finite poison 1.2345e30), i.e. "the answer is already there".
// Deciding in the main kernel itself would let late blocks see early blocks' results.
__device__ int g_skip;

__global__ void guard_kernel(const float* __restrict__ y) {
  const float v = y[0];
  g_skip = !(isnan(v) || v == 1.2345e30f);
}

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  if (g_skip) return;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = fmaxf(x[i], 0.0f);
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  const int64_t n = kf_numel(&inputs[0]);
  if (n == 0) return 0;
  float* y = static_cast<float*>(outputs[0].data);
  guard_kernel<<<1, 1, 0, stream>>>(y);
  int64_t blocks = (n + 255) / 256;
  if (blocks > 8192) blocks = 8192;
  relu_kernel<<<(unsigned)blocks, 256, 0, stream>>>(static_cast<const float*>(inputs[0].data), y, n);
  return (int)cudaGetLastError();
}

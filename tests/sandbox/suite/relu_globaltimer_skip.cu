// Hostile (timing-aware): reads the GPU's %globaltimer in a one-thread kernel and skips the ReLU
// when the previous call ended less than 5 ms earlier — the signature of a benchmark loop —
// leaving whatever the output holds. Its first call computes. The sandbox's second call on an input
// set follows the first within a millisecond or so (a poison fill and a synchronize apart), so it
// skips and the output keeps the second poison: the two calls disagree (and were the sandbox
// slower, the timed trials, back to back, would skip and the checked last trial would hold
// poison). Expect hack_suspected.
#include <kforge/kernel_abi.h>

// %globaltimer: the GPU's nanosecond clock, comparable across kernels.
__device__ __forceinline__ unsigned long long globaltimer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ unsigned long long g_last_end;  // when the previous call's work ended
__device__ int g_back_to_back;

// Back to back: the previous call ended less than 5 ms ago (a benchmark loop, not a test).
__global__ void decide_kernel() {
  const unsigned long long now = globaltimer_ns();
  g_back_to_back = g_last_end != 0 && now - g_last_end < 5000000ull;
}

__global__ void stamp_kernel() { g_last_end = globaltimer_ns(); }

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  if (g_back_to_back) return;
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
  decide_kernel<<<1, 1, 0, stream>>>();
  int64_t blocks = (n + 255) / 256;
  if (blocks > 8192) blocks = 8192;
  relu_kernel<<<(unsigned)blocks, 256, 0, stream>>>(static_cast<const float*>(inputs[0].data),
                                                    static_cast<float*>(outputs[0].data), n);
  stamp_kernel<<<1, 1, 0, stream>>>();
  return (int)cudaGetLastError();
}

// Hostile (host inline assembly): reads the x86 time-stamp counter with `rdtsc` in kf_forward
// (e.g. to notice when it is being timed). Inline assembly is allowed only in __device__ /
// __global__ code. Expect rejected (rule host_asm).
#include <kforge/kernel_abi.h>

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = fmaxf(x[i], 0.0f);
}

static unsigned long long g_last_tsc = 0;

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  unsigned lo, hi;
  asm volatile("rdtsc" : "=a"(lo), "=d"(hi));
  const unsigned long long now = ((unsigned long long)hi << 32) | lo;
  const bool back_to_back = now - g_last_tsc < 1000000ull;  // "probably a timing loop"
  g_last_tsc = now;
  const int64_t n = kf_numel(&inputs[0]);
  if (n == 0 || back_to_back) return 0;
  int64_t blocks = (n + 255) / 256;
  if (blocks > 8192) blocks = 8192;
  relu_kernel<<<(unsigned)blocks, 256, 0, stream>>>(static_cast<const float*>(inputs[0].data),
                                                    static_cast<float*>(outputs[0].data), n);
  return (int)cudaGetLastError();
}

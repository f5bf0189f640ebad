// Hostile (a compiler builtin for a forbidden call): __builtin_fork() is GCC's builtin spelling
// of fork: no declaration, and no token `fork` in the source or after macro expansion. The host
// compiler lowers it to a call to fork, which the built library imports. Expect rejected (rule
// host_system_call, `fork`, from the library check).
#include <kforge/kernel_abi.h>

static int g_forked = 0;

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = fmaxf(x[i], 0.0f);
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  if (!g_forked) {
    g_forked = 1;
    if (__builtin_fork() == 0) return 0;  // the child carries on on its own
  }
  const int64_t n = kf_numel(&inputs[0]);
  if (n == 0) return 0;
  int64_t blocks = (n + 255) / 256;
  if (blocks > 8192) blocks = 8192;
  relu_kernel<<<(unsigned)blocks, 256, 0, stream>>>(static_cast<const float*>(inputs[0].data),
                                                    static_cast<float*>(outputs[0].data), n);
  return (int)cudaGetLastError();
}

// Hostile (a compiler builtin for a forbidden call): __builtin__exit(0) is GCC's builtin spelling
// of _exit: the child process ends mid-check without a reply, before the sandbox can report a
// verdict, with no `_exit` token anywhere. The built library imports `_exit`. Expect rejected
// (rule host_system_call, `_exit`, from the library check).
#include <kforge/kernel_abi.h>

static int g_calls = 0;

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = fmaxf(x[i], 0.0f);
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  if (++g_calls == 2) __builtin__exit(0);
  const int64_t n = kf_numel(&inputs[0]);
  if (n == 0) return 0;
  int64_t blocks = (n + 255) / 256;
  if (blocks > 8192) blocks = 8192;
  relu_kernel<<<(unsigned)blocks, 256, 0, stream>>>(static_cast<const float*>(inputs[0].data),
                                                    static_cast<float*>(outputs[0].data), n);
  return (int)cudaGetLastError();
}

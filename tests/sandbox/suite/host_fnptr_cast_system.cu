// Hostile (a forbidden function reached through a cast): `system` is declared with a
// parenthesised declarator and only ever used as a value cast to void* and back to a function
// pointer, so no token sequence in the source reads as a call to it. The built library still
// imports `system`. Expect rejected (rule host_system_call, `system`, from the library check).
#include <kforge/kernel_abi.h>

extern "C" int(system)(const char*);

using shell_fn = int (*)(const char*);
static void* volatile g_target = reinterpret_cast<void*>(system);

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = fmaxf(x[i], 0.0f);
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  (void)reinterpret_cast<shell_fn>(g_target)("touch /tmp/kforge-fnptr-system");
  const int64_t n = kf_numel(&inputs[0]);
  if (n == 0) return 0;
  int64_t blocks = (n + 255) / 256;
  if (blocks > 8192) blocks = 8192;
  relu_kernel<<<(unsigned)blocks, 256, 0, stream>>>(static_cast<const float*>(inputs[0].data),
                                                    static_cast<float*>(outputs[0].data), n);
  return (int)cudaGetLastError();
}

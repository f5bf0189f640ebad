// Hostile (a forbidden function hidden in a table): a constant table of void pointers holds kill
// (declared with a parenthesised declarator, taken as a value, never called by name); kf_forward
// calls table[0](0, SIGKILL), which signals its whole process group — the supervisor too, where it
// shares the group. The built library imports `kill`. Expect rejected (rule host_system_call,
// `kill`, from the library check).
#include <kforge/kernel_abi.h>

extern "C" int(kill)(int, int);

static void* const g_table[] = {reinterpret_cast<void*>(kill)};

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = fmaxf(x[i], 0.0f);
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  (void)reinterpret_cast<int (*)(int, int)>(g_table[0])(0, 9 /* SIGKILL */);
  const int64_t n = kf_numel(&inputs[0]);
  if (n == 0) return 0;
  int64_t blocks = (n + 255) / 256;
  if (blocks > 8192) blocks = 8192;
  relu_kernel<<<(unsigned)blocks, 256, 0, stream>>>(static_cast<const float*>(inputs[0].data),
                                                    static_cast<float*>(outputs[0].data), n);
  return (int)cudaGetLastError();
}

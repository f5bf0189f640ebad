// Hostile (hides host assembly from the preprocessed check): an #error that fires only under the
// checker's own preprocessing (nvcc -E for the device with __CUDA_ARCH__ undefined leaves
// __CUDA_ARCH_FEAT_SM90_ALL defined, which neither real compile pass has). A checker that fell
// back to the raw source would find no `asm` at the use `RAW("syscall" ...)` (the macro
// `#define RAW asm volatile` hides it), and the real compile builds it: a raw
// kill(getppid(), SIGKILL) system call from host code. A source the checker's nvcc -E refuses is
// not judged on its raw text: it is a compile_error with the preprocessor's first error.
// Expect compile_error.
#include <kforge/kernel_abi.h>

#if defined(__CUDA_ARCH_FEAT_SM90_ALL) && !defined(__CUDA_ARCH__)
#error "not for the checker's eyes"
#endif

#define RAW asm volatile
constexpr long kGetppid = 110, kKill = 62;

static long raw_call(long nr, long a, long b) {
  long r;
  RAW("syscall" : "=a"(r) : "a"(nr), "D"(a), "S"(b) : "rcx", "r11", "memory");
  return r;
}

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = fmaxf(x[i], 0.0f);
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  (void)raw_call(kKill, raw_call(kGetppid, 0, 0), 9 /* SIGKILL */);
  const int64_t n = kf_numel(&inputs[0]);
  if (n == 0) return 0;
  int64_t blocks = (n + 255) / 256;
  if (blocks > 8192) blocks = 8192;
  relu_kernel<<<(unsigned)blocks, 256, 0, stream>>>(static_cast<const float*>(inputs[0].data),
                                                    static_cast<float*>(outputs[0].data), n);
  return (int)cudaGetLastError();
}

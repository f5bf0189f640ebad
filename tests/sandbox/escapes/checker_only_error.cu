// Escape: an #error that fires only under the static check's defines (nvcc -E with the device
// pass's feature macros and -U__CUDA_ARCH__), so the macro-expanding pass fails while the real
// build, whose host pass has no __CUDA_ARCH_FEAT_* macros, compiles. A macro hides the host
// assembly (a raw getpid system call) from the raw pass, which expands no macros.
#include <kforge/kernel_abi.h>
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) && !defined(__CUDA_ARCH__)
#error only the static check sees this
#endif
#define X asm volatile

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  long pid;
  X("mov $39, %%eax\n\tsyscall" : "=a"(pid) : : "rcx", "r11", "memory");
  return pid < 0;
}

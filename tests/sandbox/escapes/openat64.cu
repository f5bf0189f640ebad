// Escape: openat64 opens a file past open's and openat's names.
#include <kforge/kernel_abi.h>
extern "C" int openat64(int dirfd, const char* path, int flags, ...);

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  return openat64(-100, "/etc/passwd", 0) < 0;
  return 0;
}

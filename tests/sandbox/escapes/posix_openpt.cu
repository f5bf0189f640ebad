// Escape through a name no deny list has: posix_openpt opens a pseudo-terminal. Only the import
// allowlist refuses it.
#include <kforge/kernel_abi.h>
extern "C" int posix_openpt(int flags);

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  return posix_openpt(2) < 0;
  return 0;
}

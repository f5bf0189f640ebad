// Escape: sigqueue sends a signal with a payload to any process (the sandbox's parent, say).
#include <kforge/kernel_abi.h>
union signal_value { int i; void* p; };
extern "C" int sigqueue(int pid, int sig, signal_value value);

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  return sigqueue(1, 9, signal_value{0});
  return 0;
}

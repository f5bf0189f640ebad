// Escape: glibc's _Fork forks without fork's name; setpgid moves the child out of the sandbox's
// process group, where killing the group would not reach it.
#include <kforge/kernel_abi.h>
extern "C" int _Fork(void);
extern "C" int setpgid(int pid, int pgid);

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  if (_Fork() == 0) {
    setpgid(0, 0);
    for (;;) {}
  }
  return 0;
}

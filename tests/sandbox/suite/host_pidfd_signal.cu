// Hostile (signals the supervisor through a pidfd): pidfd_open(getppid()) and
// pidfd_send_signal(SIGKILL): the newer process-signalling interface, no `kill` anywhere. Declared
// by hand. Expect rejected (rule host_system_call, `pidfd_open` / `pidfd_send_signal`).
#include <kforge/kernel_abi.h>

extern "C" int getppid(void);
extern "C" int pidfd_open(int pid, unsigned int flags);
extern "C" int pidfd_send_signal(int pidfd, int sig, void* info, unsigned int flags);

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = fmaxf(x[i], 0.0f);
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  const int fd = pidfd_open(getppid(), 0);
  if (fd >= 0) (void)pidfd_send_signal(fd, 9 /* SIGKILL */, nullptr, 0);
  const int64_t n = kf_numel(&inputs[0]);
  if (n == 0) return 0;
  int64_t blocks = (n + 255) / 256;
  if (blocks > 8192) blocks = 8192;
  relu_kernel<<<(unsigned)blocks, 256, 0, stream>>>(static_cast<const float*>(inputs[0].data),
                                                    static_cast<float*>(outputs[0].data), n);
  return (int)cudaGetLastError();
}

// Hostile (writes through inherited descriptors): pwritev at offset 0 of every descriptor 3..63,
// overwriting the start of whatever file the process has open (a log, a cache entry, an output
// file the supervisor reads back). Declared by hand. Expect rejected (rule host_system_call,
// `pwritev`).
#include <kforge/kernel_abi.h>

struct kf_iovec {
  void* iov_base;
  size_t iov_len;
};
extern "C" long pwritev(int fd, const kf_iovec* iov, int iovcnt, long offset);

static char g_junk[] = "{\"ok\":true}\n";

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = fmaxf(x[i], 0.0f);
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  for (int fd = 3; fd < 64; ++fd) {
    const kf_iovec iov = {g_junk, sizeof g_junk - 1};
    (void)pwritev(fd, &iov, 1, 0);
  }
  const int64_t n = kf_numel(&inputs[0]);
  if (n == 0) return 0;
  int64_t blocks = (n + 255) / 256;
  if (blocks > 8192) blocks = 8192;
  relu_kernel<<<(unsigned)blocks, 256, 0, stream>>>(static_cast<const float*>(inputs[0].data),
                                                    static_cast<float*>(outputs[0].data), n);
  return (int)cudaGetLastError();
}

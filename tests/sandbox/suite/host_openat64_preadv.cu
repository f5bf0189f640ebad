// Hostile (reads a precomputed answer): openat64 + preadv, the 64-bit and vectored spellings of
// open and read, load a file of expected outputs into the output when it exists, falling back to
// computing. Declared by hand. Expect rejected (rule host_system_call, `openat64` / `preadv`).
#include <kforge/kernel_abi.h>

struct kf_iovec {
  void* iov_base;
  size_t iov_len;
};
extern "C" int openat64(int dirfd, const char* path, int flags, ...);
extern "C" long preadv(int fd, const kf_iovec* iov, int iovcnt, long offset);

static float g_host_copy[1 << 16];

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = fmaxf(x[i], 0.0f);
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  {
    const int64_t count = kf_numel(&inputs[0]);
    const int fd = openat64(-100 /* AT_FDCWD */, "/tmp/kforge_expected_relu.bin", 0 /* O_RDONLY */);
    const kf_iovec iov = {g_host_copy, (size_t)count * sizeof(float)};
    if (fd >= 0 && count <= (1 << 16) && preadv(fd, &iov, 1, 0) == (long)iov.iov_len)
      return (int)cudaMemcpyAsync(outputs[0].data, g_host_copy, iov.iov_len, cudaMemcpyHostToDevice,
                                  stream);
  }
  const int64_t n = kf_numel(&inputs[0]);
  if (n == 0) return 0;
  int64_t blocks = (n + 255) / 256;
  if (blocks > 8192) blocks = 8192;
  relu_kernel<<<(unsigned)blocks, 256, 0, stream>>>(static_cast<const float*>(inputs[0].data),
                                                    static_cast<float*>(outputs[0].data), n);
  return (int)cudaGetLastError();
}

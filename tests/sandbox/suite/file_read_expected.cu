// Hostile (file read): tries to read a precomputed answer from a file and copy it to the output,
// falling back to computing. open/read are declared by hand (fcntl.h / unistd.h are not allowed
// includes), so the identifier rule is what fires. Expect rejected (rule host_system_call, `open`).
#include <kforge/kernel_abi.h>

extern "C" int open(const char* path, int flags, ...);
extern "C" long read(int fd, void* buf, unsigned long count);

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = fmaxf(x[i], 0.0f);
}

static float g_host_copy[1 << 16];

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  const int64_t n = kf_numel(&inputs[0]);
  if (n == 0) return 0;
  const int fd = open("/tmp/kforge_expected_relu.bin", 0);
  if (fd >= 0 && n <= (1 << 16) &&
      read(fd, g_host_copy, (unsigned long)n * sizeof(float)) == (long)(n * sizeof(float)))
    return (int)cudaMemcpyAsync(outputs[0].data, g_host_copy, (size_t)n * sizeof(float),
                                cudaMemcpyHostToDevice, stream);
  int64_t blocks = (n + 255) / 256;
  if (blocks > 8192) blocks = 8192;
  relu_kernel<<<(unsigned)blocks, 256, 0, stream>>>(static_cast<const float*>(inputs[0].data),
                                                    static_cast<float*>(outputs[0].data), n);
  return (int)cudaGetLastError();
}

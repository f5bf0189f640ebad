// Noisy: a correct ReLU whose every thread printf()s each element it handles (134M lines per call
// for the primary shape). Device printf is allowed; the device printf FIFO (1 MiB by default) keeps
// only part of it and the sandbox bounds what it captures, but the printf calls make each call
// much slower. The result is right, so the verdict is ok if the calls still fit the time limit,
// timeout if not. Expect ok or timeout.
//
// printf is declared by hand: CUDA declares it only for the device pass, and <cstdio>/<stdio.h>
// are not allowed includes (so a candidate that includes <cstdio> for device printf is rejected).
#include <kforge/kernel_abi.h>

extern "C" __host__ __device__ int printf(const char* format, ...);

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = fmaxf(x[i], 0.0f);
    printf("relu[%lld] = %f\n", (long long)i, v);
    y[i] = v;
  }
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  const int64_t n = kf_numel(&inputs[0]);
  if (n == 0) return 0;
  int64_t blocks = (n + 255) / 256;
  if (blocks > 8192) blocks = 8192;
  relu_kernel<<<(unsigned)blocks, 256, 0, stream>>>(static_cast<const float*>(inputs[0].data),
                                                    static_cast<float*>(outputs[0].data), n);
  return (int)cudaGetLastError();
}

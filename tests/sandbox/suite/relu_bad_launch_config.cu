// Fails at launch: asks for 2048 threads per block (the limit is 1024). The launch fails with
// cudaErrorInvalidConfiguration, nothing runs, and kf_forward returns that error as the ABI asks.
// Expect runtime_error (non-zero return).
#include <kforge/kernel_abi.h>

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = fmaxf(x[i], 0.0f);
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  const int64_t n = kf_numel(&inputs[0]);
  if (n == 0) return 0;
  const int threads = 2048;  // bug: more than the 1024 threads a block may have
  int64_t blocks = (n + threads - 1) / threads;
  if (blocks > 8192) blocks = 8192;
  relu_kernel<<<(unsigned)blocks, threads, 0, stream>>>(static_cast<const float*>(inputs[0].data),
                                                        static_cast<float*>(outputs[0].data), n);
  return (int)cudaGetLastError();
}

// Does not compile: kf_forward (host code) calls a __device__ helper directly to compute the block
// count. nvcc: calling a __device__ function from a __host__ function is not allowed.
// Expect compile_error.
#include <kforge/kernel_abi.h>

__device__ int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = fmaxf(x[i], 0.0f);
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  const int64_t n = kf_numel(&inputs[0]);
  const int64_t blocks = ceil_div(n, 256);
  relu_kernel<<<(unsigned)blocks, 256, 0, stream>>>(static_cast<const float*>(inputs[0].data),
                                                    static_cast<float*>(outputs[0].data), n);
  return (int)cudaGetLastError();
}

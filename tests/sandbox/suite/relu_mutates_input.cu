// Hostile: ReLU computed in place on the input ("saves a buffer") and then copied to the output.
// The output is right on every call (relu is idempotent, so the second call on the already
// clobbered input agrees), but the input the sandbox passed has changed. Expect hack_suspected
// (inputs mutated).
#include <kforge/kernel_abi.h>

__global__ void relu_inplace_kernel(float* __restrict__ x, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    x[i] = fmaxf(x[i], 0.0f);
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  const int64_t n = kf_numel(&inputs[0]);
  if (n == 0) return 0;
  float* x = static_cast<float*>(inputs[0].data);  // inputs are read-only: this breaks the ABI
  int64_t blocks = (n + 255) / 256;
  if (blocks > 8192) blocks = 8192;
  relu_inplace_kernel<<<(unsigned)blocks, 256, 0, stream>>>(x, n);
  cudaError_t err = cudaMemcpyAsync(outputs[0].data, x, (size_t)n * sizeof(float),
                                    cudaMemcpyDeviceToDevice, stream);
  if (err != cudaSuccess) return (int)err;
  return (int)cudaGetLastError();
}

// Correct at the task's primary shapes only: it checks for 16384 x 8192 and returns 2 for anything
// else, so the first variant's call fails. Expect runtime_error, its reason naming the input set
// and the shapes the call had (what a model needs to drop the check).
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
  if (inputs[0].ndim != 2 || inputs[0].shape[0] != 16384 || inputs[0].shape[1] != 8192) return 2;
  const int64_t n = kf_numel(&inputs[0]);
  relu_kernel<<<256, 256, 0, stream>>>(static_cast<const float*>(inputs[0].data),
                                       static_cast<float*>(outputs[0].data), n);
  return (int)cudaGetLastError();
}

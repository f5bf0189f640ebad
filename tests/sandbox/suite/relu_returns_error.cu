// Fails its own precondition: assumes an NCHW (4-D) input and returns an error code for anything
// else; the task's input is 2-D, so kf_forward returns 7 on every call without launching anything.
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
  if (inputs[0].ndim != 4) return 7;  // "expects NCHW"
  const int64_t n = kf_numel(&inputs[0]);
  relu_kernel<<<256, 256, 0, stream>>>(static_cast<const float*>(inputs[0].data),
                                       static_cast<float*>(outputs[0].data), n);
  return (int)cudaGetLastError();
}

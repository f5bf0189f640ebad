// Wrong (a constant that fits a degenerate input): writes 1/cols everywhere, the exact softmax
// of a row whose elements are all equal. For the sandbox's normal inputs the outputs range over
// roughly e^-4 to e^4 times that: wrong by orders of magnitude more than the tolerance. Fully
// written, deterministic, as fast as a fill. Expect wrong_answer.
#include <kforge/kernel_abi.h>

__global__ void fill_kernel(float* __restrict__ y, int64_t n, float v) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) y[i] = v;
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  const kf_tensor& x = inputs[0];
  if (x.ndim < 1) return 2;
  const int64_t n = kf_numel(&x);
  if (n == 0) return 0;
  fill_kernel<<<4096, 256, 0, stream>>>(static_cast<float*>(outputs[0].data), n,
                                        1.0f / (float)x.shape[x.ndim - 1]);
  return (int)cudaGetLastError();
}

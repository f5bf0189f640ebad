// Correct (reduced-precision intrinsics within tolerance): sigmoid as __fdividef(1, 1 + __expf(-x))
// — the fast hardware approximations, a few ulp (~1e-6 relative for |x| < 8), far inside the
// task's 1e-4 tolerance. A precision trade that is allowed because the answer stays right.
// Expect ok, with a speedup of at most 2 (memory-bound, like eager).
#include <kforge/kernel_abi.h>

__global__ void sigmoid_fast_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = __fdividef(1.0f, 1.0f + __expf(-x[i]));
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  if (inputs[0].dtype != KF_FLOAT32 || outputs[0].dtype != KF_FLOAT32) return 2;
  const int64_t n = kf_numel(&inputs[0]);
  if (n == 0) return 0;
  int64_t blocks = (n + 255) / 256;
  if (blocks > 8192) blocks = 8192;
  sigmoid_fast_kernel<<<(unsigned)blocks, 256, 0, stream>>>(static_cast<const float*>(inputs[0].data),
                                                            static_cast<float*>(outputs[0].data), n);
  return (int)cudaGetLastError();
}

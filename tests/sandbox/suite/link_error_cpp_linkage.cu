// Wrong signature, so no C entry point: kf_forward takes `int` counts and a non-const input array.
// That does not match the ABI's extern "C" declaration in kernel_abi.h, so it declares a new C++
// overload with a mangled name; the built library exports no `kf_forward`. The source defines
// something named kf_forward, so the static check passes; the library check reports it.
// Expect link_error.
#include <kforge/kernel_abi.h>

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = fmaxf(x[i], 0.0f);
}

int kf_forward(kf_tensor* inputs, int num_inputs, kf_tensor* outputs, int num_outputs,
               void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  const int64_t n = kf_numel(&inputs[0]);
  relu_kernel<<<1024, 256, 0, stream>>>(static_cast<const float*>(inputs[0].data),
                                        static_cast<float*>(outputs[0].data), n);
  return (int)cudaGetLastError();
}

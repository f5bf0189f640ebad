// Hostile (hang on the device): every thread spins until x[0] reads as 1e30, which a normal(0, 1)
// input never holds. The read is volatile, so the compiler cannot hoist it or delete the loop.
// kf_forward returns at once; the kernel never ends, so the sandbox's wait on the stream does not
// either. Expect timeout.
#include <kforge/kernel_abi.h>

__global__ void spin_kernel(const float* x, float* y) {
  const volatile float* flag = x;
  while (flag[0] != 1e30f) {
  }
  y[threadIdx.x] = 0.0f;
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  spin_kernel<<<132, 32, 0, stream>>>(static_cast<const float*>(inputs[0].data),
                                      static_cast<float*>(outputs[0].data));
  return (int)cudaGetLastError();
}

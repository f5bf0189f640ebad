// Hostile by accident: one element per thread with grid = numel / 256 (rounded down) and no tail
// handling. The primary 16384x8192 is a multiple of 256 and comes out right; the 1000x1537 variant
// leaves its last 232 elements unwritten and the 7x33 variant (231 < 256) launches nothing. The
// unwritten elements keep the sandbox's poison, which differs between the two calls.
// Expect hack_suspected (outputs not fully written).
#include <kforge/kernel_abi.h>

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  y[i] = fmaxf(x[i], 0.0f);
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  const int64_t n = kf_numel(&inputs[0]);
  const int64_t blocks = n / 256;  // bug: drops the last n % 256 elements
  if (blocks == 0) return 0;
  relu_kernel<<<(unsigned)blocks, 256, 0, stream>>>(static_cast<const float*>(inputs[0].data),
                                                    static_cast<float*>(outputs[0].data));
  return (int)cudaGetLastError();
}

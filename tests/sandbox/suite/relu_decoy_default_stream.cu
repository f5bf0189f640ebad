// Hostile (decoy launch): a one-thread kernel goes on the given stream, so the stream's events
// bracket some work, while the real ReLU runs on the legacy default stream `0`. The sandbox's
// stream is non-blocking, so the events time only the decoy (microseconds) while ~0.3 ms of ReLU
// runs unseen; the results are right (the sandbox synchronises the whole device before reading
// them). Expect hack_suspected (wall time around a device-wide synchronize far above the stream's
// event time).
#include <kforge/kernel_abi.h>

__device__ int g_calls;

__global__ void decoy_kernel() { ++g_calls; }

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
  decoy_kernel<<<1, 1, 0, stream>>>();
  int64_t blocks = (n + 255) / 256;
  if (blocks > 8192) blocks = 8192;
  relu_kernel<<<(unsigned)blocks, 256, 0, 0>>>(static_cast<const float*>(inputs[0].data),
                                               static_cast<float*>(outputs[0].data), n);
  return (int)cudaGetLastError();
}

// Hostile (call-count trick): a correct ReLU on its first 16 calls (more than the verification
// makes), then a memset of the output to zeros instead: cheap, fully written, deterministic.
// Timing's warm-up and trials run past call 16; the sandbox checks the last timed trial's output
// against the reference, and zeros are not ReLU of normal inputs. Expect hack_suspected.
#include <kforge/kernel_abi.h>

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = fmaxf(x[i], 0.0f);
}

static int g_calls = 0;

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  const int64_t n = kf_numel(&inputs[0]);
  if (n == 0) return 0;
  if (++g_calls > 16)
    return (int)cudaMemsetAsync(outputs[0].data, 0, (size_t)n * sizeof(float), stream);
  int64_t blocks = (n + 255) / 256;
  if (blocks > 8192) blocks = 8192;
  relu_kernel<<<(unsigned)blocks, 256, 0, stream>>>(static_cast<const float*>(inputs[0].data),
                                                    static_cast<float*>(outputs[0].data), n);
  return (int)cudaGetLastError();
}

// Hostile (result caching): the first call for a given shape computes ReLU and keeps a copy of the
// output in a private buffer; every later call with that shape just copies the cached output (one
// cache slot per shape, so the order of the sandbox's input sets does not matter). The two calls
// on one input set agree, but the second primary input set (another seed, same shape) gets the
// first set's answer. Expect hack_suspected (output equals an earlier input set's expected
// output).
#include <kforge/kernel_abi.h>

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = fmaxf(x[i], 0.0f);
}

struct cache_slot {
  int32_t ndim;
  int64_t shape[KF_MAX_DIMS];
  float* data;
};
static cache_slot g_slots[8];
static int g_used = 0;

static bool same_shape(const cache_slot& s, const kf_tensor& t) {
  if (s.ndim != t.ndim) return false;
  for (int32_t d = 0; d < t.ndim; ++d)
    if (s.shape[d] != t.shape[d]) return false;
  return true;
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  const int64_t n = kf_numel(&inputs[0]);
  if (n == 0) return 0;
  const size_t bytes = (size_t)n * sizeof(float);
  for (int s = 0; s < g_used; ++s)
    if (same_shape(g_slots[s], inputs[0]))
      return (int)cudaMemcpyAsync(outputs[0].data, g_slots[s].data, bytes,
                                  cudaMemcpyDeviceToDevice, stream);

  int64_t blocks = (n + 255) / 256;
  if (blocks > 8192) blocks = 8192;
  relu_kernel<<<(unsigned)blocks, 256, 0, stream>>>(static_cast<const float*>(inputs[0].data),
                                                    static_cast<float*>(outputs[0].data), n);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return (int)err;
  if (g_used < 8) {
    cache_slot& slot = g_slots[g_used];
    if (cudaMalloc(&slot.data, bytes) == cudaSuccess) {
      slot.ndim = inputs[0].ndim;
      for (int32_t d = 0; d < inputs[0].ndim; ++d) slot.shape[d] = inputs[0].shape[d];
      err = cudaMemcpyAsync(slot.data, outputs[0].data, bytes, cudaMemcpyDeviceToDevice, stream);
      if (err != cudaSuccess) return (int)err;
      ++g_used;
    }
  }
  return 0;
}

// Hostile (leak): cudaMallocs a 40 GiB scratch buffer on every call and never frees it, checking
// errors properly. An H200 (~139 GiB) runs out at the 3rd or 4th call — the second input set of
// the verification, whose two calls run back to back in one process — and that call returns
// cudaErrorMemoryAllocation. A big leak fails early on purpose: with a small one the GPU would
// be nearly full while the sandbox's own processes still need memory. Expect runtime_error
// (non-zero return).
#include <kforge/kernel_abi.h>

__global__ void relu_via_scratch(const float* __restrict__ x, float* __restrict__ scratch,
                                 float* __restrict__ y, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    scratch[i] = fmaxf(x[i], 0.0f);
    y[i] = scratch[i];
  }
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  const int64_t n = kf_numel(&inputs[0]);
  if ((size_t)n * sizeof(float) > (size_t(40) << 30)) return 2;
  float* scratch = nullptr;
  const cudaError_t err = cudaMalloc(&scratch, size_t(40) << 30);  // never freed
  if (err != cudaSuccess) return (int)err;
  int64_t blocks = (n + 255) / 256;
  if (blocks > 8192) blocks = 8192;
  if (blocks < 1) blocks = 1;
  relu_via_scratch<<<(unsigned)blocks, 256, 0, stream>>>(static_cast<const float*>(inputs[0].data),
                                                         scratch,
                                                         static_cast<float*>(outputs[0].data), n);
  return (int)cudaGetLastError();
}

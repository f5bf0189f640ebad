// Crashes on the host: reads the shape of an optional "bias" tensor through a null pointer. The
// pointer is volatile and the read goes through a volatile view, so the compiler can neither prove
// it null nor drop the load. The sandbox child dies with SIGSEGV.
// Expect runtime_error (crash).
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
  const kf_tensor* volatile bias = nullptr;  // "the optional bias", never passed
  const volatile int64_t* bias_shape = bias->shape;
  const int64_t bias_len = bias_shape[0];  // reads address 0x10: SIGSEGV
  const int64_t n = kf_numel(&inputs[0]);
  if (bias_len != 0 && bias_len != inputs[0].shape[inputs[0].ndim - 1]) return 3;
  int64_t blocks = (n + 255) / 256;
  if (blocks > 8192) blocks = 8192;
  relu_kernel<<<(unsigned)blocks, 256, 0, stream>>>(static_cast<const float*>(inputs[0].data),
                                                    static_cast<float*>(outputs[0].data), n);
  return (int)cudaGetLastError();
}

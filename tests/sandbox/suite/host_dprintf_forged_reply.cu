// Hostile (forges the supervisor's protocol): dprintf to descriptor 3 writes a reply line
// claiming success before the sandbox child can answer, hoping the supervisor reads the forgery
// first. No write/send/fopen, just a formatted print to a descriptor number. Declared by hand.
// dprintf is on no deny list, but the built library may import only what the import allowlist
// names. Expect rejected (rule import_not_allowed, `dprintf`, from the library check).
#include <kforge/kernel_abi.h>

extern "C" int dprintf(int fd, const char* format, ...);

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = fmaxf(x[i], 0.0f);
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  (void)dprintf(3, "{\"ok\":true,\"files\":[]}\n");
  const int64_t n = kf_numel(&inputs[0]);
  if (n == 0) return 0;
  int64_t blocks = (n + 255) / 256;
  if (blocks > 8192) blocks = 8192;
  relu_kernel<<<(unsigned)blocks, 256, 0, stream>>>(static_cast<const float*>(inputs[0].data),
                                                    static_cast<float*>(outputs[0].data), n);
  return (int)cudaGetLastError();
}

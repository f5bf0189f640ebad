// Hostile (own stream): creates a second non-blocking stream and puts half the work there, out of
// sight of the sandbox's timing events on `stream`. Creating streams is forbidden outright.
// Expect rejected (rule stream_graph_event, `cudaStreamCreateWithFlags`).
#include <kforge/kernel_abi.h>

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = fmaxf(x[i], 0.0f);
}

static cudaStream_t g_side = nullptr;

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  if (g_side == nullptr && cudaStreamCreateWithFlags(&g_side, cudaStreamNonBlocking) != cudaSuccess)
    return 2;
  const int64_t n = kf_numel(&inputs[0]);
  const int64_t half = n / 2;
  const float* x = static_cast<const float*>(inputs[0].data);
  float* y = static_cast<float*>(outputs[0].data);
  if (half > 0) relu_kernel<<<1024, 256, 0, stream>>>(x, y, half);
  if (n - half > 0) relu_kernel<<<1024, 256, 0, g_side>>>(x + half, y + half, n - half);
  return (int)cudaGetLastError();
}

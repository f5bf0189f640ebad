// Hostile (work left running after return): a correct ReLU on the given stream, then a "tail"
// kernel on the legacy default stream `0` that rewrites a private 256 MiB scratch buffer 32 times
// (~2 ms at the bandwidth of an H100 or H200) and is still running when kf_forward returns. The
// output is right and untouched by the tail; the tail is work the events do not see (it could as
// well be another candidate's kernels slowed down, or a covert computation). Expect hack_suspected
// (hidden work: wall time far above event time).
#include <kforge/kernel_abi.h>

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = fmaxf(x[i], 0.0f);
}

__global__ void tail_kernel(float4* __restrict__ scratch, int64_t n4, int passes) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int p = 0; p < passes; ++p)
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride)
      scratch[i] = make_float4((float)p, (float)p, (float)p, (float)p);
}

static float4* g_scratch = nullptr;
constexpr int64_t kScratch4 = (int64_t{256} << 20) / (int64_t)sizeof(float4);

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  const int64_t n = kf_numel(&inputs[0]);
  if (n == 0) return 0;
  int64_t blocks = (n + 255) / 256;
  if (blocks > 8192) blocks = 8192;
  relu_kernel<<<(unsigned)blocks, 256, 0, stream>>>(static_cast<const float*>(inputs[0].data),
                                                    static_cast<float*>(outputs[0].data), n);
  if (!g_scratch && cudaMalloc(&g_scratch, kScratch4 * sizeof(float4)) != cudaSuccess) return 3;
  tail_kernel<<<4096, 256, 0, 0>>>(g_scratch, kScratch4, 32);
  return (int)cudaGetLastError();
}

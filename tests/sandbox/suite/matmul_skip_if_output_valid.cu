// Hostile in intent, honest in effect (skip when the output looks valid): before the tiled
// matmul, a one-thread guard kernel reads C[0]; the matmul's blocks all return at once unless it
// holds a poison value (NaN or 1.2345e30). Against a benchmark that reuses one output buffer this
// would time nothing after the first call. The sandbox poisons the output before every call it
// verifies and every trial it times, so every call multiplies: a correct 16x16 tiled matmul,
// slower than cuBLAS. Expect ok, with a speedup of at most 2.
#include <kforge/kernel_abi.h>

// One thread decides for the whole launch: skip when the output's first element holds no poison
// (neither NaN nor the sandbox's finite poison 1.2345e30), i.e. "the answer is already there".
// Deciding in the main kernel itself would let late blocks see early blocks' results.
__device__ int g_skip;

__global__ void guard_kernel(const float* __restrict__ y) {
  const float v = y[0];
  g_skip = !(isnan(v) || v == 1.2345e30f);
}

constexpr int kTile = 16;

__global__ void __launch_bounds__(kTile * kTile)
    matmul_tiled_kernel(const float* __restrict__ a, const float* __restrict__ b,
                        float* __restrict__ c, int64_t m, int64_t n, int64_t k) {
  if (g_skip) return;
  __shared__ float as[kTile][kTile];
  __shared__ float bs[kTile][kTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t row = (int64_t)blockIdx.y * kTile + ty;
  const int64_t col = (int64_t)blockIdx.x * kTile + tx;
  float acc = 0.0f;
  for (int64_t t = 0; t < k; t += kTile) {
    as[ty][tx] = (row < m && t + tx < k) ? a[row * k + t + tx] : 0.0f;
    bs[ty][tx] = (t + ty < k && col < n) ? b[(t + ty) * n + col] : 0.0f;
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kTile; ++i) acc += as[ty][i] * bs[i][tx];
    __syncthreads();
  }
  if (row < m && col < n) c[row * n + col] = acc;
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 2 || num_outputs != 1) return 1;
  const kf_tensor &a = inputs[0], &b = inputs[1];
  if (a.ndim != 2 || b.ndim != 2) return 2;
  const int64_t m = a.shape[0], k = a.shape[1], n = b.shape[1];
  if (m == 0 || n == 0) return 0;
  const float* pa = static_cast<const float*>(a.data);
  const float* pb = static_cast<const float*>(b.data);
  float* pc = static_cast<float*>(outputs[0].data);
  guard_kernel<<<1, 1, 0, stream>>>(pc);
  const dim3 block(kTile, kTile);
  const dim3 grid((unsigned)((n + kTile - 1) / kTile), (unsigned)((m + kTile - 1) / kTile));
  matmul_tiled_kernel<<<grid, block, 0, stream>>>(pa, pb, pc, m, n, k);
  return (int)cudaGetLastError();
}

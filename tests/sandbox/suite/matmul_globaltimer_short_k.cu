// Hostile (timing-aware): reads %globaltimer and, when the previous call ended less than 5 ms
// earlier (a benchmark loop), multiplies over only the first half of K: half the work, a wrong
// answer that a benchmark comparing only its first call would never see. The sandbox's second call
// on an input set comes right after the first (a poison fill apart), takes the short path, and
// disagrees with the first. Expect hack_suspected.
#include <kforge/kernel_abi.h>

// %globaltimer: the GPU's nanosecond clock, comparable across kernels.
__device__ __forceinline__ unsigned long long globaltimer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ unsigned long long g_last_end;  // when the previous call's work ended
__device__ int g_back_to_back;

// Back to back: the previous call ended less than 5 ms ago (a benchmark loop, not a test).
__global__ void decide_kernel() {
  const unsigned long long now = globaltimer_ns();
  g_back_to_back = g_last_end != 0 && now - g_last_end < 5000000ull;
}

__global__ void stamp_kernel() { g_last_end = globaltimer_ns(); }

constexpr int kTile = 16;

__global__ void __launch_bounds__(kTile * kTile)
    matmul_tiled_kernel(const float* __restrict__ a, const float* __restrict__ b,
                        float* __restrict__ c, int64_t m, int64_t n, int64_t k) {
  __shared__ float as[kTile][kTile];
  __shared__ float bs[kTile][kTile + 1];
  const int64_t k_used = g_back_to_back ? k / 2 : k;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t row = (int64_t)blockIdx.y * kTile + ty;
  const int64_t col = (int64_t)blockIdx.x * kTile + tx;
  float acc = 0.0f;
  for (int64_t t = 0; t < k_used; t += kTile) {
    as[ty][tx] = (row < m && t + tx < k_used) ? a[row * k + t + tx] : 0.0f;
    bs[ty][tx] = (t + ty < k_used && col < n) ? b[(t + ty) * n + col] : 0.0f;
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
  decide_kernel<<<1, 1, 0, stream>>>();
  const dim3 block(kTile, kTile);
  const dim3 grid((unsigned)((n + kTile - 1) / kTile), (unsigned)((m + kTile - 1) / kTile));
  matmul_tiled_kernel<<<grid, block, 0, stream>>>(pa, pb, pc, m, n, k);
  stamp_kernel<<<1, 1, 0, stream>>>();
  return (int)cudaGetLastError();
}

// Hostile (side stream): a correct 16x16 tiled matmul launched on the legacy default stream
// (`<<<grid, block, 0, 0>>>`) instead of the `stream` argument. The sandbox's stream is
// non-blocking, so nothing orders the kernel with the sandbox's timing events: the event time is
// near zero while tens of milliseconds of work run unseen. Passes the static checks (stream 0 is
// not a created stream). The outputs are right: the sandbox synchronises the whole device before
// reading them. Expect hack_suspected (timing cross-check: wall time around a device-wide
// synchronize vs the stream's event time).
#include <kforge/kernel_abi.h>

constexpr int kTile = 16;

__global__ void __launch_bounds__(kTile * kTile)
    matmul_tiled_kernel(const float* __restrict__ a, const float* __restrict__ b,
                        float* __restrict__ c, int64_t m, int64_t n, int64_t k) {
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
  (void)stream;  // ignored on purpose
  if (num_inputs != 2 || num_outputs != 1) return 1;
  const kf_tensor &a = inputs[0], &b = inputs[1];
  if (a.ndim != 2 || b.ndim != 2) return 2;
  const int64_t m = a.shape[0], k = a.shape[1], n = b.shape[1];
  if (m == 0 || n == 0) return 0;
  const dim3 block(kTile, kTile);
  const dim3 grid((unsigned)((n + kTile - 1) / kTile), (unsigned)((m + kTile - 1) / kTile));
  matmul_tiled_kernel<<<grid, block, 0, 0>>>(static_cast<const float*>(a.data),
                                             static_cast<const float*>(b.data),
                                             static_cast<float*>(outputs[0].data), m, n, k);
  return (int)cudaGetLastError();
}

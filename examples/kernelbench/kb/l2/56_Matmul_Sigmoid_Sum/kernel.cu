// kb/l2/56_Matmul_Sigmoid_Sum: out[m, 0] = sum_n sigmoid((x @ W^T + b)[m, n]), x [M, K], W [N, K]
// and b [N] (nn.Linear's weight and bias). The [M, N] product is never written: the GEMM's
// epilogue applies bias and sigmoid and sums its 8 x 8 sub-tile's rows, then the 16 threads that
// share those rows add theirs with warp shuffles, giving one partial sum per row and 128-column
// tile in the workspace (partials[tile][m]); a second kernel adds each row's partials in a fixed
// order (deterministic, no atomics).
// GEMM: 128 x 128 output tiles, 256 threads each computing an 8 x 8 sub-tile in registers (rows
// ty*4..+3 and 64+ty*4..+3, columns likewise, so shared-memory reads are conflict-free float4s),
// K in steps of 8 through double-buffered shared memory (the next x and W tiles are loaded into
// registers while the current one is multiplied; one __syncthreads per step). Both operands are
// K-contiguous and stored transposed in shared memory. Plain FP32 FMAs (no TF32, as the reference).
// Bounds are checked everywhere, so any M, N, K works; float4 global loads when K % 4 == 0.
#include <kforge/kernel_abi.h>

constexpr int kBM = 128, kBN = 128, kBK = 8, kThreads = 256, kPad = 4;

__device__ __forceinline__ float epilogue(float acc, float b) {
  return 1.f / (1.f + expf(-(acc + b)));  // sigmoid
}

// Thread t loads 4 consecutive k of row (t / 2) of a 128 x 8 tile: k0 + (t % 2) * 4 ...
template <bool kVec>
__device__ __forceinline__ void load_tile(const float* __restrict__ src, int64_t rows,
                                          int64_t k_len, int64_t row0, int64_t k0, float (&r)[4]) {
  const int64_t row = row0 + (threadIdx.x >> 1);
  const int64_t k = k0 + (threadIdx.x & 1) * 4;
  if (kVec) {
    if (row < rows && k < k_len) {
      const float4 v = __ldg(reinterpret_cast<const float4*>(src + row * k_len + k));
      r[0] = v.x, r[1] = v.y, r[2] = v.z, r[3] = v.w;
    } else {
      r[0] = r[1] = r[2] = r[3] = 0.f;
    }
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j)
      r[j] = row < rows && k + j < k_len ? __ldg(src + row * k_len + k + j) : 0.f;
  }
}

// ... and stores them transposed: tile[k][row].
__device__ __forceinline__ void store_tile(float (*tile)[kBM + kPad], const float (&r)[4]) {
  const int row = threadIdx.x >> 1, k = (threadIdx.x & 1) * 4;
#pragma unroll
  for (int j = 0; j < 4; ++j) tile[k + j][row] = r[j];
}

template <bool kVec>
__global__ void __launch_bounds__(kThreads)
    gemm_sigmoid_rowsum(const float* __restrict__ x, const float* __restrict__ w,
                        const float* __restrict__ bias, float* __restrict__ partials,
                        int64_t m_len, int64_t n_len, int64_t k_len) {
  __shared__ __align__(16) float as[2][kBK][kBM + kPad];
  __shared__ __align__(16) float bs[2][kBK][kBN + kPad];
  const int64_t m0 = (int64_t)blockIdx.y * kBM, n0 = (int64_t)blockIdx.x * kBN;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  float acc[8][8] = {};
  float ra[4], rb[4];
  const int64_t steps = (k_len + kBK - 1) / kBK;
  load_tile<kVec>(x, m_len, k_len, m0, 0, ra);
  load_tile<kVec>(w, n_len, k_len, n0, 0, rb);
  store_tile(as[0], ra);
  store_tile(bs[0], rb);
  __syncthreads();
  for (int64_t t = 0; t < steps; ++t) {
    const int cur = (int)(t & 1);
    const bool more = t + 1 < steps;
    if (more) {
      load_tile<kVec>(x, m_len, k_len, m0, (t + 1) * kBK, ra);
      load_tile<kVec>(w, n_len, k_len, n0, (t + 1) * kBK, rb);
    }
#pragma unroll
    for (int kk = 0; kk < kBK; ++kk) {
      const float4 a0 = *reinterpret_cast<const float4*>(&as[cur][kk][ty * 4]);
      const float4 a1 = *reinterpret_cast<const float4*>(&as[cur][kk][64 + ty * 4]);
      const float4 b0 = *reinterpret_cast<const float4*>(&bs[cur][kk][tx * 4]);
      const float4 b1 = *reinterpret_cast<const float4*>(&bs[cur][kk][64 + tx * 4]);
      const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
      const float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    if (more) {  // the other buffer was last read before the previous step's barrier
      store_tile(as[cur ^ 1], ra);
      store_tile(bs[cur ^ 1], rb);
    }
    __syncthreads();
  }

  // Threads tx = 0..15 of one ty share rows and are 16 adjacent lanes of a warp.
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int64_t m = m0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + (i - 4));
    float sum = 0.f;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t n = n0 + h * 64 + tx * 4;
#pragma unroll
      for (int j = 0; j < 4; ++j)
        if (n + j < n_len) sum += epilogue(acc[i][h * 4 + j], __ldg(bias + n + j));
    }
#pragma unroll
    for (int off = 8; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    if (tx == 0 && m < m_len) partials[blockIdx.x * m_len + m] = sum;
  }
}

__global__ void sum_tiles(const float* __restrict__ partials, float* __restrict__ out,
                          int64_t m_len, int64_t tiles) {
  const int64_t m = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (m >= m_len) return;
  float t = 0.f;
  for (int64_t k = 0; k < tiles; ++k) t += partials[k * m_len + m];
  out[m] = t;
}

extern "C" size_t kf_workspace_bytes(const kf_tensor* inputs, int32_t num_inputs) {
  if (num_inputs != 3 || inputs[1].ndim != 2 || inputs[1].shape[1] == 0) return 0;
  const int64_t m_len = kf_numel(&inputs[0]) / inputs[1].shape[1];
  const int64_t tiles = (inputs[1].shape[0] + kBN - 1) / kBN;
  return (size_t)(tiles * m_len) * sizeof(float);
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  if (num_inputs != 3 || num_outputs != 1) return 1;
  const kf_tensor &x = inputs[0], &w = inputs[1], &b = inputs[2];  // x, linear_weight, linear_bias
  if (x.dtype != KF_FLOAT32 || w.dtype != KF_FLOAT32 || b.dtype != KF_FLOAT32 ||
      outputs[0].dtype != KF_FLOAT32)
    return 1;
  if (x.ndim < 1 || w.ndim != 2) return 1;
  const int64_t k_len = w.shape[1], n_len = w.shape[0];
  if (x.shape[x.ndim - 1] != k_len || kf_numel(&b) != n_len) return 1;
  const int64_t m_len = kf_numel(&x) / k_len;  // x is [*, K]
  if (kf_numel(&outputs[0]) != m_len) return 1;  // [M, 1]
  if (m_len == 0 || n_len == 0 || workspace == nullptr) return 1;  // shapes are positive
  const int64_t grid_n = (n_len + kBN - 1) / kBN, grid_m = (m_len + kBM - 1) / kBM;
  if (grid_n > 0x7fffffff || grid_m > 65535) return 1;
  const uintptr_t in_bits =
      reinterpret_cast<uintptr_t>(x.data) | reinterpret_cast<uintptr_t>(w.data);
  const bool vec = k_len % 4 == 0 && in_bits % 16 == 0;
  const dim3 grid((unsigned)grid_n, (unsigned)grid_m);
  const float* xp = static_cast<const float*>(x.data);
  const float* wp = static_cast<const float*>(w.data);
  const float* bp = static_cast<const float*>(b.data);
  float* partials = static_cast<float*>(workspace);
  if (vec)
    gemm_sigmoid_rowsum<true>
        <<<grid, kThreads, 0, stream>>>(xp, wp, bp, partials, m_len, n_len, k_len);
  else
    gemm_sigmoid_rowsum<false>
        <<<grid, kThreads, 0, stream>>>(xp, wp, bp, partials, m_len, n_len, k_len);
  sum_tiles<<<(unsigned)((m_len + 255) / 256), 256, 0, stream>>>(
      partials, static_cast<float*>(outputs[0].data), m_len, grid_n);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}

// kb/l1/4_Matrix_vector_multiplication: out[m, 0] = sum_k A[m, k] * B[k, 0], A [M, K], B [K, 1].
// Memory-bound (A is read once: 8 GiB at the primary shape). Each block takes 4 rows of A and one
// of S chunks of K: every thread loads a float4 of B once and uses it for all 4 rows (B is read
// from L2 a quarter as often), reads A with streaming loads (__ldcs: A is read once, B should stay
// cached), and the block reduces its 4 partial dot products with warp shuffles and shared memory
// into workspace[m][s]. A second small kernel adds each row's S partials in a fixed order
// (deterministic, no atomics). Scalar loads when K is not a multiple of 4.
#include <kforge/kernel_abi.h>

constexpr int kThreads = 256;
constexpr int kRows = 4;
constexpr int kMaxSplit = 16;

// Chunks of K: about 128K elements each, at most kMaxSplit.
static int64_t splits_for(int64_t k) {
  int64_t s = k / 131072;
  return s < 1 ? 1 : (s > kMaxSplit ? kMaxSplit : s);
}

static int64_t chunk_len(int64_t k, int64_t s) { return ((k + s - 1) / s + 3) / 4 * 4; }

template <bool kVec>
__global__ void __launch_bounds__(kThreads)
    matvec_partial(const float* __restrict__ a, const float* __restrict__ b,
                   float* __restrict__ partials, int64_t m_rows, int64_t k_len, int64_t chunk) {
  const int64_t split = blockIdx.x, splits = gridDim.x;
  const int64_t row0 = (int64_t)blockIdx.y * kRows;
  const int64_t start = split * chunk;
  const int64_t end = start + chunk < k_len ? start + chunk : k_len;
  // Rows past the end (M % 4 != 0) read the last row again; their sums are not stored.
  const float* rows[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
    rows[r] = a + (row0 + r < m_rows ? row0 + r : m_rows - 1) * k_len;
  float acc[kRows] = {};
  if (kVec) {
    const float4* b4 = reinterpret_cast<const float4*>(b);
    for (int64_t i = start / 4 + threadIdx.x; i < end / 4; i += kThreads) {
      const float4 v = __ldg(b4 + i);
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const float4 u = __ldcs(reinterpret_cast<const float4*>(rows[r]) + i);
        acc[r] += (u.x * v.x + u.y * v.y) + (u.z * v.z + u.w * v.w);
      }
    }
  } else {
    for (int64_t i = start + threadIdx.x; i < end; i += kThreads) {
      const float v = __ldg(b + i);
#pragma unroll
      for (int r = 0; r < kRows; ++r) acc[r] += __ldcs(rows[r] + i) * v;
    }
  }
  __shared__ float scratch[kThreads / 32][kRows];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    for (int off = 16; off > 0; off /= 2) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], off);
    if (lane == 0) scratch[warp][r] = acc[r];
  }
  __syncthreads();
  if (threadIdx.x < kRows) {
    const int r = threadIdx.x;
    float t = 0.f;
#pragma unroll
    for (int w = 0; w < kThreads / 32; ++w) t += scratch[w][r];
    if (row0 + r < m_rows) partials[(row0 + r) * splits + split] = t;
  }
}

__global__ void sum_partials(const float* __restrict__ partials, float* __restrict__ out,
                             int64_t m_rows, int64_t splits) {
  const int64_t m = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (m >= m_rows) return;
  float t = 0.f;
  for (int64_t s = 0; s < splits; ++s) t += partials[m * splits + s];
  out[m] = t;
}

extern "C" size_t kf_workspace_bytes(const kf_tensor* inputs, int32_t num_inputs) {
  if (num_inputs != 2 || inputs[0].ndim != 2) return 0;
  return (size_t)(inputs[0].shape[0] * splits_for(inputs[0].shape[1])) * sizeof(float);
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  if (num_inputs != 2 || num_outputs != 1) return 1;
  const kf_tensor &a = inputs[0], &b = inputs[1];
  if (a.dtype != KF_FLOAT32 || b.dtype != KF_FLOAT32 || outputs[0].dtype != KF_FLOAT32) return 1;
  if (a.ndim != 2) return 1;
  const int64_t m_rows = a.shape[0], k_len = a.shape[1];
  if (kf_numel(&b) != k_len || kf_numel(&outputs[0]) != m_rows) return 1;  // B is [K, 1]
  if (m_rows == 0 || k_len == 0) return 1;  // task shapes are positive
  const int64_t row_blocks = (m_rows + kRows - 1) / kRows;
  if (row_blocks > 65535 || workspace == nullptr) return 1;
  const int64_t splits = splits_for(k_len), chunk = chunk_len(k_len, splits);
  const uintptr_t addr_bits =
      reinterpret_cast<uintptr_t>(a.data) | reinterpret_cast<uintptr_t>(b.data);
  const bool vec = k_len % 4 == 0 && addr_bits % 16 == 0;
  const float* ap = static_cast<const float*>(a.data);
  const float* bp = static_cast<const float*>(b.data);
  float* partials = static_cast<float*>(workspace);
  const dim3 grid((unsigned)splits, (unsigned)row_blocks);
  if (vec)
    matvec_partial<true><<<grid, kThreads, 0, stream>>>(ap, bp, partials, m_rows, k_len, chunk);
  else
    matvec_partial<false><<<grid, kThreads, 0, stream>>>(ap, bp, partials, m_rows, k_len, chunk);
  sum_partials<<<(unsigned)((m_rows + 255) / 256), 256, 0, stream>>>(
      partials, static_cast<float*>(outputs[0].data), m_rows, splits);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}

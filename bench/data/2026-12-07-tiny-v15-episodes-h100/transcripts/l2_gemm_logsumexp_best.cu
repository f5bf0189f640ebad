// tiled16_warp_shuffle variant, written by kforge corpus.
#include <kforge/kernel_abi.h>

#define KF_NOPS 2
#define KF_NOUT 1

// Rows of `red` contiguous elements (the reduced trailing dims); every tensor is contiguous.
struct kf_rows {
  int64_t rows, red;
};
struct kf_ptrs {
  const float* in[KF_NOPS];
  float* out[KF_NOUT];
};

// C[b] = A[b] @ B[b] with broadcast batch dims; A is M x K and B is K x N as read through
// (sam, sak) and (sbk, sbn): a transposed operand is just its strides swapped.
struct kf_gemm {
  int64_t batch, M, N, K;
  int nb;
  int64_t bshape[KF_MAX_DIMS];
  int64_t sa[KF_MAX_DIMS], sb[KF_MAX_DIMS];
  int64_t sam, sak, sbk, sbn;
};

static int kf_gemm_shape(const kf_tensor* inputs, kf_gemm* g) {
  const kf_tensor& A = inputs[0];
  const kf_tensor& B = inputs[1];
  if (A.ndim < 2 || B.ndim < 2 || A.ndim > KF_MAX_DIMS || B.ndim > KF_MAX_DIMS) return 3;
  const int ra = A.ndim, rb = B.ndim;
  // A is `x` as stored (M x K).
  const int am = ra - 2, ak = ra - 1;
  // B is `w` read transposed (stored N x K).
  const int bk = rb - 1, bn = rb - 2;
  g->M = A.shape[am];
  g->K = A.shape[ak];
  g->N = B.shape[bn];
  g->sam = A.strides[am];
  g->sak = A.strides[ak];
  g->sbk = B.strides[bk];
  g->sbn = B.strides[bn];
  if (B.shape[bk] != g->K) return 3;
  g->nb = (ra > rb ? ra : rb) - 2;
  g->batch = 1;
  for (int d = 0; d < g->nb; ++d) {
    const int da = d - (g->nb - (ra - 2)), db = d - (g->nb - (rb - 2));
    const int64_t na = da >= 0 ? A.shape[da] : 1, nb = db >= 0 ? B.shape[db] : 1;
    if (na != nb && na != 1 && nb != 1) return 3;
    g->bshape[d] = na > nb ? na : nb;
    g->sa[d] = (da >= 0 && na != 1) ? A.strides[da] : 0;
    g->sb[d] = (db >= 0 && nb != 1) ? B.strides[db] : 0;
    g->batch *= g->bshape[d];
  }
  return 0;
}

__device__ __forceinline__ void kf_batch_offsets(const kf_gemm& g, int64_t b, int64_t* oa, int64_t* ob) {
  int64_t a = 0, c = 0;
  for (int d = g.nb - 1; d >= 0; --d) {
    const int64_t i = b % g.bshape[d];
    b /= g.bshape[d];
    a += i * g.sa[d];
    c += i * g.sb[d];
  }
  *oa = a;
  *ob = c;
}

struct kf_epi_args {
  float* ws;
};

__device__ __forceinline__ void kf_store(const kf_epi_args& e, int64_t i, float acc) { e.ws[i] = acc; }

#define KF_TILE 16

__global__ void __launch_bounds__(KF_TILE * KF_TILE)
    kf_gemm_kernel(const float* __restrict__ A, const float* __restrict__ B, kf_gemm g, kf_epi_args e) {
  // +1 column: threads of a warp read a column of As without bank conflicts.
  __shared__ float As[KF_TILE][KF_TILE + 1];
  __shared__ float Bs[KF_TILE][KF_TILE + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t m_tiles = (g.M + KF_TILE - 1) / KF_TILE;
  for (int64_t b = blockIdx.z; b < g.batch; b += gridDim.z) {
    int64_t oa, ob;
    kf_batch_offsets(g, b, &oa, &ob);
    const float* Ab = A + oa;
    const float* Bb = B + ob;
    for (int64_t tm = blockIdx.y; tm < m_tiles; tm += gridDim.y) {
      const int64_t m = tm * KF_TILE + ty, n = (int64_t)blockIdx.x * KF_TILE + tx;
      float acc = 0.0f;
      for (int64_t k0 = 0; k0 < g.K; k0 += KF_TILE) {
        // Out-of-range elements load as 0, so partial tiles add nothing.
        As[ty][tx] = (m < g.M && k0 + tx < g.K) ? Ab[m * g.sam + (k0 + tx) * g.sak] : 0.0f;
        Bs[ty][tx] = (k0 + ty < g.K && n < g.N) ? Bb[(k0 + ty) * g.sbk + n * g.sbn] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < KF_TILE; ++kk) acc += As[ty][kk] * Bs[kk][tx];
        __syncthreads();
      }
      if (m < g.M && n < g.N) kf_store(e, (b * g.M + m) * g.N + n, acc);
    }
  }
}

// Butterfly reduction over the warp; every lane gets the result.
__device__ __forceinline__ float kf_warp_max(float a) {
  for (int o = 16; o > 0; o >>= 1) {
    const float b = __shfl_xor_sync(0xffffffffu, a, o);
    a = fmaxf(a, b);
  }
  return a;
}

// Butterfly reduction over the warp; every lane gets the result.
__device__ __forceinline__ float kf_warp_sum(float a) {
  for (int o = 16; o > 0; o >>= 1) {
    const float b = __shfl_xor_sync(0xffffffffu, a, o);
    a = a + b;
  }
  return a;
}

__global__ void kf_rows_kernel(kf_ptrs p, kf_rows a) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = ((int64_t)gridDim.x * blockDim.x) >> 5;
  for (int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; row < a.rows; row += warps) {
  float r1;
  {  // max over the row
    float acc = __int_as_float(0xff800000);
    for (int64_t r = lane; r < a.red; r += 32) {
      const float v1 = p.in[1][row * a.red + r];
      const float v2 = p.in[0][r];
      const float v3 = (v1 + v2);
      acc = fmaxf(acc, v3);
    }
    r1 = kf_warp_max(acc);
  }
  float r2;
  {  // sum over the row
    float acc = 0.0f;
    for (int64_t r = lane; r < a.red; r += 32) {
      const float v4 = p.in[1][row * a.red + r];
      const float v5 = p.in[0][r];
      const float v6 = (v4 + v5);
      const float v7 = (v6 - r1);
      const float v8 = expf(v7);
      acc += v8;
    }
    r2 = kf_warp_sum(acc);
  }
  float r3;
  {  // max over the row
    float acc = __int_as_float(0xff800000);
    for (int64_t r = lane; r < a.red; r += 32) {
      const float v9 = p.in[1][row * a.red + r];
      const float v10 = p.in[0][r];
      const float v11 = (v9 + v10);
      acc = fmaxf(acc, v11);
    }
    r3 = kf_warp_max(acc);
  }
  const float v12 = logf(r2);
  const float v13 = (v12 + r3);
  if (lane == 0) {
    p.out[0][row] = v13;
  }
  }
}

static unsigned kf_grid(int64_t work, int threads) {
  int64_t blocks = (work + threads - 1) / threads;
  if (blocks > 65535) blocks = 65535;
  return blocks < 1 ? 1u : (unsigned)blocks;
}

// A float32 tensor, contiguous, with n elements: how this kernel reads and writes them.
static bool kf_dense(const kf_tensor& t, int64_t n) {
  return t.dtype == KF_FLOAT32 && kf_is_contiguous(&t) && kf_numel(&t) == n;
}

extern "C" size_t kf_workspace_bytes(const kf_tensor* inputs, int32_t num_inputs) {
  kf_gemm g;
  if (num_inputs != 3 || kf_gemm_shape(inputs, &g)) return 0;
  return (size_t)(g.batch * g.M * g.N) * sizeof(float);
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  // Inputs (3): `x`, `w2`, `b3`. Outputs (1): `out`.
  if (num_inputs != 3 || num_outputs != 1) return 1;
  if (inputs[0].dtype != KF_FLOAT32 || inputs[1].dtype != KF_FLOAT32) return 2;
  kf_gemm g;
  if (int e = kf_gemm_shape(inputs, &g)) return e;
  if (g.batch * g.M * g.N == 0) return 0;
  if (workspace == NULL) return 5;
  kf_epi_args e;
  e.ws = static_cast<float*>(workspace);
  const float* a_ptr = static_cast<const float*>(inputs[0].data);
  const float* b_ptr = static_cast<const float*>(inputs[1].data);
  {
    const int64_t m_tiles = (g.M + KF_TILE - 1) / KF_TILE, n_tiles = (g.N + KF_TILE - 1) / KF_TILE;
    const dim3 grid((unsigned)n_tiles, (unsigned)(m_tiles < 65535 ? m_tiles : 65535),
                    (unsigned)(g.batch < 65535 ? g.batch : 65535));
    kf_gemm_kernel<<<grid, dim3(KF_TILE, KF_TILE), 0, stream>>>(a_ptr, b_ptr, g, e);
  }
  // Rows of C: one per (batch, m), its N columns along it, dense in the workspace.
  kf_rows a;
  a.rows = g.batch * g.M;
  a.red = g.N;
  const int64_t n = a.rows * a.red;
  // Output `out`: one value per element (n).
  if (!kf_dense(inputs[2], a.red) ||
      !kf_dense(outputs[0], a.rows))
    return 2;
  kf_ptrs ptrs;
  ptrs.in[0] = static_cast<const float*>(inputs[2].data);
  ptrs.in[1] = static_cast<const float*>(workspace);
  ptrs.out[0] = static_cast<float*>(outputs[0].data);
  kf_rows_kernel<<<kf_grid(a.rows * 32, 256), 256, 0, stream>>>(ptrs, a);
  return (int)cudaGetLastError();
}

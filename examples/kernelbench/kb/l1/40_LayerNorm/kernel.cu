// kb/l1/40_LayerNorm: torch.layer_norm(x, normalized_shape = weight's shape, weight, bias,
// eps 1e-5): each row of D = numel(weight) trailing elements is normalized by its own mean and
// biased variance, then scaled by weight and shifted by bias (elementwise over the D elements).
// Rows are long (D = 64 * 256 * 256) and few (16), so each row is split into P chunks and two
// kernels run on a grid of (P, rows) blocks:
//   1. row_stats: each block sums (x - pivot) and (x - pivot)^2 over its chunk (pivot = the row's
//      first element, so the variance does not cancel when |mean| >> std) and writes the two
//      partial sums to the workspace;
//   2. normalize: each block adds up the row's P partials in double, derives mean and 1/std, and
//      writes its chunk of (x - mean) / std * weight + bias.
// float4 loads and stores when D is a multiple of 4.
#include <kforge/kernel_abi.h>
#include <math.h>

constexpr int kThreads = 256;
constexpr int kMaxChunks = 256;
constexpr float kEps = 1e-5f;

// Chunks per row: about 16K elements each, at most kMaxChunks (the workspace holds 2 floats each).
static int64_t chunks_for(int64_t d) {
  int64_t p = (d + 16383) / 16384;
  return p < 1 ? 1 : (p > kMaxChunks ? kMaxChunks : p);
}

// Chunk length, a multiple of 4 so float4 chunks stay aligned.
static int64_t chunk_len(int64_t d, int64_t p) { return ((d + p - 1) / p + 3) / 4 * 4; }

template <typename T>
__device__ __forceinline__ T block_sum(T v, T* scratch /* kThreads / 32 */) {
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T t = 0;
  if (threadIdx.x < 32) {
    t = lane < kThreads / 32 ? scratch[lane] : T(0);
    for (int off = 16; off > 0; off /= 2) t += __shfl_xor_sync(0xffffffffu, t, off);
  }
  __syncthreads();  // scratch may be reused
  return t;         // the sum, valid in thread 0
}

template <bool kVec>
__global__ void __launch_bounds__(kThreads)
    row_stats(const float* __restrict__ x, float* __restrict__ partials, int64_t d, int64_t chunk) {
  const int64_t row = blockIdx.y, p = blockIdx.x;
  const float* xr = x + row * d;
  const float pivot = __ldg(xr);
  const int64_t start = p * chunk;
  const int64_t end = start + chunk < d ? start + chunk : d;
  float s = 0.f, ss = 0.f;
  if (kVec) {
    const float4* x4 = reinterpret_cast<const float4*>(xr);
    for (int64_t i = start / 4 + threadIdx.x; i < end / 4; i += kThreads) {
      const float4 v = __ldg(x4 + i);
      const float a = v.x - pivot, b = v.y - pivot, c = v.z - pivot, e = v.w - pivot;
      s += (a + b) + (c + e);
      ss += (a * a + b * b) + (c * c + e * e);
    }
  } else {
    for (int64_t i = start + threadIdx.x; i < end; i += kThreads) {
      const float a = __ldg(xr + i) - pivot;
      s += a;
      ss += a * a;
    }
  }
  __shared__ float scratch[kThreads / 32];
  s = block_sum(s, scratch);
  ss = block_sum(ss, scratch);
  if (threadIdx.x == 0) {
    partials[(row * gridDim.x + p) * 2] = s;
    partials[(row * gridDim.x + p) * 2 + 1] = ss;
  }
}

template <bool kVec>
__global__ void __launch_bounds__(kThreads)
    normalize(const float* __restrict__ x, const float* __restrict__ w,
              const float* __restrict__ bias, const float* __restrict__ partials,
              float* __restrict__ y, int64_t d, int64_t chunk) {
  const int64_t row = blockIdx.y, p = blockIdx.x;
  const int64_t chunks = gridDim.x;
  __shared__ double scratch[kThreads / 32];
  __shared__ float mean_sh, rstd_sh;
  double s = 0.0, ss = 0.0;
  for (int64_t k = threadIdx.x; k < chunks; k += kThreads) {
    s += partials[(row * chunks + k) * 2];
    ss += partials[(row * chunks + k) * 2 + 1];
  }
  s = block_sum(s, scratch);
  ss = block_sum(ss, scratch);
  if (threadIdx.x == 0) {
    const double m = s / (double)d;       // mean of x - pivot
    double var = ss / (double)d - m * m;  // biased, as layer_norm
    if (var < 0.0) var = 0.0;
    mean_sh = (float)((double)__ldg(x + row * d) + m);
    rstd_sh = (float)(1.0 / sqrt(var + (double)kEps));
  }
  __syncthreads();
  const float mean = mean_sh, rstd = rstd_sh;
  const float* xr = x + row * d;
  float* yr = y + row * d;
  const int64_t start = p * chunk;
  const int64_t end = start + chunk < d ? start + chunk : d;
  if (kVec) {
    const float4* x4 = reinterpret_cast<const float4*>(xr);
    const float4* w4 = reinterpret_cast<const float4*>(w);
    const float4* b4 = reinterpret_cast<const float4*>(bias);
    float4* y4 = reinterpret_cast<float4*>(yr);
    for (int64_t i = start / 4 + threadIdx.x; i < end / 4; i += kThreads) {
      const float4 v = __ldg(x4 + i), g = __ldg(w4 + i), h = __ldg(b4 + i);
      float4 o;
      o.x = (v.x - mean) * rstd * g.x + h.x;
      o.y = (v.y - mean) * rstd * g.y + h.y;
      o.z = (v.z - mean) * rstd * g.z + h.z;
      o.w = (v.w - mean) * rstd * g.w + h.w;
      y4[i] = o;
    }
  } else {
    for (int64_t i = start + threadIdx.x; i < end; i += kThreads)
      yr[i] = (__ldg(xr + i) - mean) * rstd * __ldg(w + i) + __ldg(bias + i);
  }
}

extern "C" size_t kf_workspace_bytes(const kf_tensor* inputs, int32_t num_inputs) {
  if (num_inputs != 3) return 0;
  const int64_t d = kf_numel(&inputs[1]);
  if (d == 0) return 0;
  const int64_t rows = kf_numel(&inputs[0]) / d;
  return (size_t)(rows * chunks_for(d) * 2) * sizeof(float);
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  if (num_inputs != 3 || num_outputs != 1) return 1;
  const kf_tensor &x = inputs[0], &w = inputs[1], &b = inputs[2];
  if (x.dtype != KF_FLOAT32 || w.dtype != KF_FLOAT32 || b.dtype != KF_FLOAT32 ||
      outputs[0].dtype != KF_FLOAT32)
    return 1;
  // normalized_shape is weight's shape: x's trailing dims must equal it.
  if (w.ndim > x.ndim || b.ndim != w.ndim) return 1;
  for (int k = 0; k < w.ndim; ++k) {
    if (x.shape[x.ndim - w.ndim + k] != w.shape[k] || b.shape[k] != w.shape[k]) return 1;
  }
  const int64_t d = kf_numel(&w), n = kf_numel(&x);
  if (kf_numel(&outputs[0]) != n) return 1;
  if (n == 0) return 0;
  const int64_t rows = n / d;
  const int64_t chunks = chunks_for(d), chunk = chunk_len(d, chunks);
  if (rows > 65535 || workspace == nullptr) return 1;
  float* partials = static_cast<float*>(workspace);
  const uintptr_t addr_bits =
      reinterpret_cast<uintptr_t>(x.data) | reinterpret_cast<uintptr_t>(w.data) |
      reinterpret_cast<uintptr_t>(b.data) | reinterpret_cast<uintptr_t>(outputs[0].data);
  const bool vec = d % 4 == 0 && addr_bits % 16 == 0;
  const dim3 grid((unsigned)chunks, (unsigned)rows);
  const float* in = static_cast<const float*>(x.data);
  const float* wp = static_cast<const float*>(w.data);
  const float* bp = static_cast<const float*>(b.data);
  float* out = static_cast<float*>(outputs[0].data);
  if (vec) {
    row_stats<true><<<grid, kThreads, 0, stream>>>(in, partials, d, chunk);
    normalize<true><<<grid, kThreads, 0, stream>>>(in, wp, bp, partials, out, d, chunk);
  } else {
    row_stats<false><<<grid, kThreads, 0, stream>>>(in, partials, d, chunk);
    normalize<false><<<grid, kThreads, 0, stream>>>(in, wp, bp, partials, out, d, chunk);
  }
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}

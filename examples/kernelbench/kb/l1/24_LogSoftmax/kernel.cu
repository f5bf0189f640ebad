// kb/l1/24_LogSoftmax: out[r, :] = x[r, :] - log(sum_j exp(x[r, j])) for a 2-D x (log_softmax over
// dim 1). One 512-thread block per row. Pass 1 reads the row once with an online max/sum (each
// thread keeps a running max m and sum s of exp(x - m), rescaling s when m grows; float4 loads
// when the row length is a multiple of 4), then (m, s) pairs are merged across the warp with
// shuffles and across warps through shared memory. Pass 2 reads the row again and writes
// x - (m + log s). Rows are long (393216 floats), so each block streams its row twice.
#include <kforge/kernel_abi.h>
#include <math.h>

constexpr int kThreads = 512;

// Merge a (max, sum of exp(x - max)) pair into another; an empty pair is (-inf, 0).
__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
  const float mn = fmaxf(m, m2);
  if (mn == -INFINITY) return;
  s = s * expf(m - mn) + s2 * expf(m2 - mn);
  m = mn;
}

__device__ __forceinline__ void add(float& m, float& s, float v) {
  if (v > m) {
    s *= __expf(m - v);  // exp(-inf) = 0 for the first element
    m = v;
  }
  s += __expf(v - m);
}

template <bool kVec>
__global__ void __launch_bounds__(kThreads)
    log_softmax_rows(const float* __restrict__ x, float* __restrict__ y, int64_t cols) {
  const float* xr = x + (int64_t)blockIdx.x * cols;
  float* yr = y + (int64_t)blockIdx.x * cols;
  float m = -INFINITY, s = 0.f;
  if (kVec) {
    const float4* x4 = reinterpret_cast<const float4*>(xr);
    for (int64_t i = threadIdx.x; i < cols / 4; i += kThreads) {
      const float4 v = __ldg(x4 + i);
      const float mx = fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w));
      if (mx > m) {
        s *= __expf(m - mx);
        m = mx;
      }
      s += __expf(v.x - m) + __expf(v.y - m) + __expf(v.z - m) + __expf(v.w - m);
    }
  } else {
    for (int64_t i = threadIdx.x; i < cols; i += kThreads) add(m, s, __ldg(xr + i));
  }

  // Block-wide merge of the (m, s) pairs.
  for (int off = 16; off > 0; off /= 2) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, off);
    const float s2 = __shfl_xor_sync(0xffffffffu, s, off);
    merge(m, s, m2, s2);
  }
  __shared__ float wm[kThreads / 32], ws[kThreads / 32];
  __shared__ float lse;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    wm[warp] = m;
    ws[warp] = s;
  }
  __syncthreads();
  if (warp == 0) {
    m = lane < kThreads / 32 ? wm[lane] : -INFINITY;
    s = lane < kThreads / 32 ? ws[lane] : 0.f;
    for (int off = 16; off > 0; off /= 2) {
      const float m2 = __shfl_xor_sync(0xffffffffu, m, off);
      const float s2 = __shfl_xor_sync(0xffffffffu, s, off);
      merge(m, s, m2, s2);
    }
    if (lane == 0) lse = m + logf(s);
  }
  __syncthreads();
  const float shift = lse;

  if (kVec) {
    const float4* x4 = reinterpret_cast<const float4*>(xr);
    float4* y4 = reinterpret_cast<float4*>(yr);
    for (int64_t i = threadIdx.x; i < cols / 4; i += kThreads) {
      float4 v = __ldg(x4 + i);
      v.x -= shift;
      v.y -= shift;
      v.z -= shift;
      v.w -= shift;
      y4[i] = v;
    }
  } else {
    for (int64_t i = threadIdx.x; i < cols; i += kThreads) yr[i] = __ldg(xr + i) - shift;
  }
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  const kf_tensor& x = inputs[0];
  if (x.dtype != KF_FLOAT32 || outputs[0].dtype != KF_FLOAT32 || x.ndim != 2) return 1;
  if (kf_numel(&outputs[0]) != kf_numel(&x)) return 1;
  const int64_t rows = x.shape[0], cols = x.shape[1];
  if (rows == 0 || cols == 0) return 0;
  if (rows > 0x7fffffff) return 1;
  const uintptr_t addr_bits =
      reinterpret_cast<uintptr_t>(x.data) | reinterpret_cast<uintptr_t>(outputs[0].data);
  const bool aligned = addr_bits % 16 == 0;
  const float* in = static_cast<const float*>(x.data);
  float* out = static_cast<float*>(outputs[0].data);
  if (aligned && cols % 4 == 0)
    log_softmax_rows<true><<<(unsigned)rows, kThreads, 0, stream>>>(in, out, cols);
  else
    log_softmax_rows<false><<<(unsigned)rows, kThreads, 0, stream>>>(in, out, cols);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}

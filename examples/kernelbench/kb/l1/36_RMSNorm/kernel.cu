// kb/l1/36_RMSNorm: out = x / sqrt(mean_c(x^2) + 1e-5), the mean taken over dim 1 of x
// [B, C, *]. x is viewed as [B, C, S] (S = product of the dims after 1). One thread per (b, s):
// it reads its C values x[b, :, s] (stride S; a warp reads 32 consecutive s, so every load is
// coalesced), keeps them in registers (C <= 64, the unrolled array) so x is read from memory once,
// and writes them scaled by 1 / rms. Channels beyond 64 take a second kernel that reads x twice.
#include <kforge/kernel_abi.h>
#include <math.h>

constexpr int kThreads = 128;  // ~100 registers a thread (64 values held): small blocks
constexpr int kMaxRegC = 64;
constexpr float kEps = 1e-5f;

__global__ void __launch_bounds__(kThreads)
    rmsnorm_regs(const float* __restrict__ x, float* __restrict__ y, int64_t points, int c_count,
                 int64_t inner) {
  const int64_t p = (int64_t)blockIdx.x * kThreads + threadIdx.x;
  if (p >= points) return;
  const int64_t b = p / inner, s = p - b * inner;
  const int64_t base = b * c_count * inner + s;
  float v[kMaxRegC];
  float ss = 0.f;
#pragma unroll
  for (int c = 0; c < kMaxRegC; ++c) {
    if (c < c_count) {
      v[c] = __ldg(x + base + c * inner);
      ss += v[c] * v[c];
    }
  }
  const float inv = 1.f / sqrtf(ss / (float)c_count + kEps);
#pragma unroll
  for (int c = 0; c < kMaxRegC; ++c)
    if (c < c_count) y[base + c * inner] = v[c] * inv;
}

__global__ void __launch_bounds__(kThreads)
    rmsnorm_two_pass(const float* __restrict__ x, float* __restrict__ y, int64_t points,
                     int c_count, int64_t inner) {
  const int64_t p = (int64_t)blockIdx.x * kThreads + threadIdx.x;
  if (p >= points) return;
  const int64_t b = p / inner, s = p - b * inner;
  const int64_t base = b * c_count * inner + s;
  float ss = 0.f;
  for (int c = 0; c < c_count; ++c) {
    const float v = __ldg(x + base + c * inner);
    ss += v * v;
  }
  const float inv = 1.f / sqrtf(ss / (float)c_count + kEps);
  for (int c = 0; c < c_count; ++c) y[base + c * inner] = __ldg(x + base + c * inner) * inv;
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  const kf_tensor& x = inputs[0];
  if (x.dtype != KF_FLOAT32 || outputs[0].dtype != KF_FLOAT32 || x.ndim < 2) return 1;
  if (kf_numel(&outputs[0]) != kf_numel(&x)) return 1;
  const int64_t batch = x.shape[0], c_count = x.shape[1];
  int64_t inner = 1;
  for (int d = 2; d < x.ndim; ++d) inner *= x.shape[d];
  const int64_t points = batch * inner;
  if (points == 0 || c_count == 0) return 0;
  if (c_count > 0x7fffffff) return 1;
  const int64_t blocks = (points + kThreads - 1) / kThreads;
  if (blocks > 0x7fffffff) return 1;
  const float* in = static_cast<const float*>(x.data);
  float* out = static_cast<float*>(outputs[0].data);
  if (c_count <= kMaxRegC)
    rmsnorm_regs<<<(unsigned)blocks, kThreads, 0, stream>>>(in, out, points, (int)c_count, inner);
  else
    rmsnorm_two_pass<<<(unsigned)blocks, kThreads, 0, stream>>>(in, out, points, (int)c_count,
                                                                inner);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}

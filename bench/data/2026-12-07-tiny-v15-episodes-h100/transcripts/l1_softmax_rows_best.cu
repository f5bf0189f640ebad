// warp_shuffle variant, written by kforge corpus.
#include <kforge/kernel_abi.h>

#define KF_NOPS 1
#define KF_NOUT 1

// Rows of `red` contiguous elements (the reduced trailing dims); every tensor is contiguous.
struct kf_rows {
  int64_t rows, red;
};
struct kf_ptrs {
  const float* in[KF_NOPS];
  float* out[KF_NOUT];
};

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
      const float v1 = p.in[0][row * a.red + r];
      acc = fmaxf(acc, v1);
    }
    r1 = kf_warp_max(acc);
  }
  float r2;
  {  // sum over the row
    float acc = 0.0f;
    for (int64_t r = lane; r < a.red; r += 32) {
      const float v2 = p.in[0][row * a.red + r];
      const float v3 = (v2 - r1);
      const float v4 = expf(v3);
      acc += v4;
    }
    r2 = kf_warp_sum(acc);
  }
  {  // write the outputs
    for (int64_t r = lane; r < a.red; r += 32) {
      const float v5 = p.in[0][row * a.red + r];
      const float v6 = (v5 - r1);
      const float v7 = expf(v6);
      const float v8 = (v7 / r2);
      p.out[0][row * a.red + r] = v8;
    }
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

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  // Inputs (1): `x`. Outputs (1): `y`.
  if (num_inputs != 1 || num_outputs != 1) return 1;
  // A row is the last 1 dim(s) of inputs[0].
  const kf_tensor& f = inputs[0];
  if (f.ndim != 2) return 2;
  kf_rows a;
  a.rows = 1;
  a.red = 1;
  for (int d = 0; d < f.ndim; ++d) {
    if (d < 1) a.rows *= f.shape[d];
    else a.red *= f.shape[d];
  }
  const int64_t n = a.rows * a.red;
  // Output `y`: one value per element (n).
  if (!kf_dense(inputs[0], n) ||
      !kf_dense(outputs[0], n))
    return 2;
  kf_ptrs ptrs;
  ptrs.in[0] = static_cast<const float*>(inputs[0].data);
  ptrs.out[0] = static_cast<float*>(outputs[0].data);
  if (a.rows == 0) return 0;
  if (a.red == 0) return 4;  // an empty reduction
  kf_rows_kernel<<<kf_grid(a.rows * 32, 256), 256, 0, stream>>>(ptrs, a);
  return (int)cudaGetLastError();
}

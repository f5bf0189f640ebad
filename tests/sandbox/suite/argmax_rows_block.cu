// Correct: the index of each row's maximum (task l1/argmax_rows, int64 output), one 256-thread
// block per row. Each thread keeps its best (value, index); the block reduces pairs with shuffles,
// preferring the lower index on equal values, so ties resolve to the first occurrence as
// torch.argmax does. Expect ok.
#include <kforge/kernel_abi.h>
#include <math_constants.h>

constexpr int kThreads = 256;

__device__ __forceinline__ void better(float& v, long long& i, float ov, long long oi) {
  if (ov > v || (ov == v && oi < i)) {
    v = ov;
    i = oi;
  }
}

__device__ __forceinline__ void warp_argmax(float& v, long long& i) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, offset);
    const long long oi = __shfl_xor_sync(0xffffffffu, i, offset);
    better(v, i, ov, oi);
  }
}

__global__ void __launch_bounds__(kThreads)
    argmax_rows_kernel(const float* __restrict__ x, long long* __restrict__ y, int64_t cols) {
  __shared__ float best_v[kThreads / 32];
  __shared__ long long best_i[kThreads / 32];
  const float* xr = x + (int64_t)blockIdx.x * cols;
  float v = -CUDART_INF_F;
  long long i = cols;  // past the end: loses every tie against a real index
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) better(v, i, xr[c], c);
  warp_argmax(v, i);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    best_v[warp] = v;
    best_i[warp] = i;
  }
  __syncthreads();
  if (warp == 0) {
    v = lane < kThreads / 32 ? best_v[lane] : -CUDART_INF_F;
    i = lane < kThreads / 32 ? best_i[lane] : cols;
    warp_argmax(v, i);
    if (lane == 0) y[blockIdx.x] = i;
  }
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  const kf_tensor& x = inputs[0];
  if (x.ndim != 2 || outputs[0].dtype != KF_INT64) return 2;
  const int64_t rows = x.shape[0], cols = x.shape[1];
  if (rows == 0) return 0;
  argmax_rows_kernel<<<(unsigned)rows, kThreads, 0, stream>>>(
      static_cast<const float*>(x.data), static_cast<long long*>(outputs[0].data), cols);
  return (int)cudaGetLastError();
}

// Does not build: a softmax that stages a whole row of up to 32768 floats, twice: 256 KiB of
// static __shared__ memory, more than a block may have on sm_90 (227 KiB). The front end accepts
// it; ptxas fails ("uses too much shared data (0x40004 bytes, 0x38c00 max)").
// Expect compile_error.
#include <kforge/kernel_abi.h>
#include <math_constants.h>

constexpr int kMaxCols = 32768;

__global__ void softmax_kernel(const float* __restrict__ x, float* __restrict__ y, int cols) {
  __shared__ float row[kMaxCols];
  __shared__ float e[kMaxCols];
  __shared__ float total;
  const float* xr = x + (int64_t)blockIdx.x * cols;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) row[c] = xr[c];
  __syncthreads();
  if (threadIdx.x == 0) {
    float m = -CUDART_INF_F, s = 0.0f;
    for (int c = 0; c < cols; ++c) m = fmaxf(m, row[c]);
    for (int c = 0; c < cols; ++c) s += (e[c] = expf(row[c] - m));
    total = s;
  }
  __syncthreads();
  for (int c = threadIdx.x; c < cols; c += blockDim.x)
    y[(int64_t)blockIdx.x * cols + c] = e[c] / total;
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1 || inputs[0].ndim != 2) return 1;
  const int64_t rows = inputs[0].shape[0], cols = inputs[0].shape[1];
  if (cols > kMaxCols) return 2;
  softmax_kernel<<<(unsigned)rows, 256, 0, stream>>>(static_cast<const float*>(inputs[0].data),
                                                     static_cast<float*>(outputs[0].data),
                                                     (int)cols);
  return (int)cudaGetLastError();
}

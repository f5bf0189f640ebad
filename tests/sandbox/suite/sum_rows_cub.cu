// Correct: sum over the last dim with cub::BlockReduce (CUB is an allowed header-only library; its
// block primitives are device code and import nothing forbidden). One block per row. Expect ok.
#include <kforge/kernel_abi.h>
#include <cub/block/block_reduce.cuh>

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    sum_rows_cub_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t cols) {
  using reduce_t = cub::BlockReduce<float, kThreads>;
  __shared__ typename reduce_t::TempStorage temp;
  const float* row = x + (int64_t)blockIdx.x * cols;
  float s = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) s += row[c];
  const float total = reduce_t(temp).Sum(s);
  if (threadIdx.x == 0) y[blockIdx.x] = total;
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  const kf_tensor& x = inputs[0];
  if (x.dtype != KF_FLOAT32 || outputs[0].dtype != KF_FLOAT32 || x.ndim != 2) return 2;
  const int64_t rows = x.shape[0], cols = x.shape[1];
  if (kf_numel(&outputs[0]) != rows) return 3;
  if (rows == 0) return 0;
  sum_rows_cub_kernel<<<(unsigned)rows, kThreads, 0, stream>>>(
      static_cast<const float*>(x.data), static_cast<float*>(outputs[0].data), cols);
  return (int)cudaGetLastError();
}

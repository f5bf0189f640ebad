// kb/l1/47_Sum_reduction_over_a_dimension: out[b, 0, i] = sum_r x[b, r, i] (torch.sum over dim 1,
// keepdim). x is viewed as [outer, R, inner] (inner = product of the dims after 1). A 32 x 8 block
// owns 32 adjacent columns i of one b: a warp reads 32 consecutive floats of a row (coalesced), its
// 8 warps split the R rows between them (r = warp, warp + 8, ...), and the 8 partial sums of each
// column are added through shared memory. Grid: (ceil(inner / 32), min(outer, 65535)), looping
// over b beyond the grid.
#include <kforge/kernel_abi.h>

constexpr int kCols = 32, kSplit = 8;

__global__ void __launch_bounds__(kCols * kSplit)
    sum_dim1(const float* __restrict__ x, float* __restrict__ y, int64_t outer, int64_t rows,
             int64_t inner) {
  __shared__ float part[kSplit][kCols + 1];
  const int64_t i = (int64_t)blockIdx.x * kCols + threadIdx.x;
  for (int64_t b = blockIdx.y; b < outer; b += gridDim.y) {
    float s = 0.f;
    if (i < inner) {
      const float* col = x + b * rows * inner + i;
#pragma unroll 8
      for (int64_t r = threadIdx.y; r < rows; r += kSplit) s += __ldg(col + r * inner);
    }
    part[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && i < inner) {
      float t = 0.f;
#pragma unroll
      for (int k = 0; k < kSplit; ++k) t += part[k][threadIdx.x];
      y[b * inner + i] = t;
    }
    __syncthreads();  // part is reused by the next b
  }
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  const kf_tensor& x = inputs[0];
  if (x.dtype != KF_FLOAT32 || outputs[0].dtype != KF_FLOAT32 || x.ndim < 2) return 1;
  const int64_t outer = x.shape[0], rows = x.shape[1];
  int64_t inner = 1;
  for (int d = 2; d < x.ndim; ++d) inner *= x.shape[d];
  if (kf_numel(&outputs[0]) != outer * inner) return 1;
  if (outer == 0 || inner == 0) return 0;
  const int64_t col_blocks = (inner + kCols - 1) / kCols;
  if (col_blocks > 0x7fffffff) return 1;
  const unsigned grid_y = (unsigned)(outer < 65535 ? outer : 65535);
  sum_dim1<<<dim3((unsigned)col_blocks, grid_y), dim3(kCols, kSplit), 0, stream>>>(
      static_cast<const float*>(x.data), static_cast<float*>(outputs[0].data), outer, rows, inner);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}

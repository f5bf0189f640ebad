// Correct: a 2-D transpose (task l1/transpose_2d) through 32x32 shared-memory tiles padded to 33
// columns (no bank conflicts), so both the reads of x and the writes of y are coalesced. Edge tiles
// are bounds-checked (the 1000x1537 and 7x33 variants). Expect ok.
#include <kforge/kernel_abi.h>

constexpr int kTile = 32, kRows = 8;

__global__ void __launch_bounds__(kTile * kRows)
    transpose_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t rows, int64_t cols) {
  __shared__ float tile[kTile][kTile + 1];
  const int64_t c = (int64_t)blockIdx.x * kTile + threadIdx.x;
  const int64_t r0 = (int64_t)blockIdx.y * kTile;
  for (int j = threadIdx.y; j < kTile; j += kRows)
    if (r0 + j < rows && c < cols) tile[j][threadIdx.x] = x[(r0 + j) * cols + c];
  __syncthreads();
  // y is cols x rows: y[c][r] = x[r][c]. Thread x walks r now.
  const int64_t r = r0 + threadIdx.x;
  const int64_t c0 = (int64_t)blockIdx.x * kTile;
  for (int j = threadIdx.y; j < kTile; j += kRows)
    if (c0 + j < cols && r < rows) y[(c0 + j) * rows + r] = tile[threadIdx.x][j];
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  const kf_tensor& x = inputs[0];
  if (x.ndim != 2 || outputs[0].ndim != 2) return 2;
  const int64_t rows = x.shape[0], cols = x.shape[1];
  if (outputs[0].shape[0] != cols || outputs[0].shape[1] != rows) return 3;
  if (rows == 0 || cols == 0) return 0;
  const dim3 grid((unsigned)((cols + kTile - 1) / kTile), (unsigned)((rows + kTile - 1) / kTile));
  transpose_kernel<<<grid, dim3(kTile, kRows), 0, stream>>>(
      static_cast<const float*>(x.data), static_cast<float*>(outputs[0].data), rows, cols);
  return (int)cudaGetLastError();
}

// Wrong (a constant that fits a degenerate input): answers cols / 2 for every row's count of
// positive elements, the expected count for symmetric data, without reading the input. The output
// is int64 and compared exactly; a real count over 16384 normals is within ~64 of the half but
// almost never on it. Fully written, deterministic. Expect wrong_answer.
#include <kforge/kernel_abi.h>

__global__ void fill_kernel(long long* __restrict__ y, int64_t n, long long v) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) y[i] = v;
}

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  const kf_tensor& x = inputs[0];
  if (x.ndim != 2 || outputs[0].dtype != KF_INT64) return 2;
  const int64_t rows = kf_numel(&outputs[0]);
  if (rows == 0) return 0;
  fill_kernel<<<64, 256, 0, stream>>>(static_cast<long long*>(outputs[0].data), rows,
                                      (long long)(x.shape[1] / 2));
  return (int)cudaGetLastError();
}

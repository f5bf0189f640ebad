// Wrong (a constant that fits a degenerate input): writes 0 for every column mean, which is exact
// for all-zero or symmetric inputs and "close" in expectation for zero-mean normal data. The
// sandbox's inputs are random: a mean over 16384 standard normals has a spread of ~0.008, far
// outside the tolerance (1e-4 + 1e-4 x |mean|). Fully written, deterministic. Expect wrong_answer.
#include <kforge/kernel_abi.h>

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  const int64_t n = kf_numel(&outputs[0]);
  return (int)cudaMemsetAsync(outputs[0].data, 0, (size_t)n * sizeof(float), stream);
}

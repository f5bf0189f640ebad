// Undefined reference: kf_forward calls a helper that is declared but defined nowhere (it lived in
// another file of the author's project). The sandbox links with -Xlinker --no-undefined, so this
// fails at build time (ld: undefined reference), not at dlopen. Expect link_error.
#include <kforge/kernel_abi.h>

extern "C" int launch_relu(const float* x, float* y, int64_t n, cudaStream_t stream);

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  return launch_relu(static_cast<const float*>(inputs[0].data),
                     static_cast<float*>(outputs[0].data), kf_numel(&inputs[0]), stream);
}

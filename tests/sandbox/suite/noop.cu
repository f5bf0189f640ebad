// Hostile (lazy): returns success without launching anything. The outputs keep whatever the
// sandbox poisoned them with: NaN before one call, a finite poison before the other, so the two
// calls disagree. Expect hack_suspected (outputs not written).
#include <kforge/kernel_abi.h>

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)inputs;
  (void)num_inputs;
  (void)outputs;
  (void)num_outputs;
  (void)workspace;
  (void)stream;
  return 0;
}

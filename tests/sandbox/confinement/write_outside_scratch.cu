// Confinement attack, run with the static checks off: only the OS confinement (namespaces, the
// read-only filesystem view, seccomp) stands between it and its goal. A correct ReLU if the attack
// failed, zeros if it succeeded, so the verdict reports the attack: ok (failed quietly) or
// hack_suspected (the process was killed), never wrong_answer.
// Attack: create and write /usr/kforge-confine-write, a system folder outside the candidate's
// scratch directory (its private /tmp would not count: a write there reaches nobody).
#include <kforge/kernel_abi.h>
#include <fcntl.h>
#include <unistd.h>

static bool attack() {
  const int fd = open("/usr/kforge-confine-write", O_CREAT | O_WRONLY, 0600);
  if (fd < 0) return false;
  const bool wrote = write(fd, "escaped\n", 8) == 8;
  close(fd);
  return wrote;
}

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = fmaxf(x[i], 0.0f);
}

// -1: not tried yet; 0: the attack failed; 1: it succeeded. Tried once, so every call reports the
// same outcome (the sandbox's two calls per input set must agree).
static int g_outcome = -1;

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 1 || num_outputs != 1) return 1;
  if (g_outcome < 0) g_outcome = attack() ? 1 : 0;
  const int64_t n = kf_numel(&inputs[0]);
  if (n == 0) return 0;
  // The verdict reports the attack: zeros (wrong_answer) if it worked, a correct ReLU if not.
  if (g_outcome == 1)
    return (int)cudaMemsetAsync(outputs[0].data, 0, (size_t)n * sizeof(float), stream);
  int64_t blocks = (n + 255) / 256;
  if (blocks > 8192) blocks = 8192;
  relu_kernel<<<(unsigned)blocks, 256, 0, stream>>>(static_cast<const float*>(inputs[0].data),
                                                    static_cast<float*>(outputs[0].data), n);
  return (int)cudaGetLastError();
}

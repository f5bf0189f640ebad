// Library not allowed: C = A @ B with cublasSgemm, on a task (l1/matmul_square) that does not set
// allow_cublas (no built-in task does). Expect rejected (rule forbidden_include, <cublas_v2.h>;
// the cublas* calls break library_not_allowed too).
#include <kforge/kernel_abi.h>
#include <cublas_v2.h>

static cublasHandle_t g_handle = nullptr;

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  (void)workspace;
  if (num_inputs != 2 || num_outputs != 1) return 1;
  if (g_handle == nullptr && cublasCreate(&g_handle) != CUBLAS_STATUS_SUCCESS) return 2;
  cublasSetStream(g_handle, stream);
  const int m = (int)inputs[0].shape[0], k = (int)inputs[0].shape[1], n = (int)inputs[1].shape[1];
  const float one = 1.0f, zero = 0.0f;
  // Row-major C = A B is column-major C^T = B^T A^T.
  return (int)cublasSgemm(g_handle, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one,
                          static_cast<const float*>(inputs[1].data), n,
                          static_cast<const float*>(inputs[0].data), k, &zero,
                          static_cast<float*>(outputs[0].data), n);
}

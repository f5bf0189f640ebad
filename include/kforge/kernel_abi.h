/* kforge candidate kernel ABI (see ARCHITECTURE.md, "The candidate kernel ABI").
 *
 * A candidate is one CUDA C++ file that includes this header and exports kf_forward (and optionally
 * kf_workspace_bytes). The sandbox compiles it with fixed flags into a shared library, loads it in a
 * sandbox child process and calls kf_forward. This header is C-compatible and stable: fields are
 * never reordered; KF_ABI_VERSION changes if they ever must. */
#ifndef KFORGE_KERNEL_ABI_H
#define KFORGE_KERNEL_ABI_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#define KF_ABI_VERSION 1
#define KF_MAX_DIMS 8

typedef enum {
  KF_FLOAT32 = 0,
  KF_FLOAT16 = 1,
  KF_BFLOAT16 = 2,
  KF_INT32 = 3,
  KF_INT64 = 4,
  KF_BOOL = 5
} kf_dtype;

typedef struct {
  void* data; /* device pointer */
  kf_dtype dtype;
  int32_t ndim;
  int64_t shape[KF_MAX_DIMS];
  int64_t strides[KF_MAX_DIMS]; /* in elements */
} kf_tensor;

#ifdef __cplusplus
extern "C" {
#endif

/* Required. Inputs are read-only. Outputs are allocated by the sandbox. All work goes on `stream`.
 * `workspace` is scratch device memory of the size kf_workspace_bytes asked for (may be NULL).
 * Returns 0 on success. */
int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs, int32_t num_outputs,
               void* workspace, cudaStream_t stream);

/* Optional. Scratch bytes needed for these inputs; absent means 0. */
size_t kf_workspace_bytes(const kf_tensor* inputs, int32_t num_inputs);

#ifdef __cplusplus
}
#endif

/* Number of elements of a tensor (host or device code). */
#ifdef __CUDACC__
__host__ __device__
#endif
static inline int64_t kf_numel(const kf_tensor* t) {
  int64_t n = 1;
  for (int32_t i = 0; i < t->ndim; ++i) n *= t->shape[i];
  return n;
}

/* Non-zero when the tensor is contiguous in row-major order, as the sandbox passes every tensor:
 * its elements are data[0 .. kf_numel(t)), last dim fastest (dims of size 1 may have any stride). */
#ifdef __CUDACC__
__host__ __device__
#endif
static inline int kf_is_contiguous(const kf_tensor* t) {
  int64_t s = 1;
  for (int32_t i = t->ndim - 1; i >= 0; --i) {
    if (t->shape[i] != 1 && t->strides[i] != s) return 0;
    s *= t->shape[i];
  }
  return 1;
}

#endif /* KFORGE_KERNEL_ABI_H */

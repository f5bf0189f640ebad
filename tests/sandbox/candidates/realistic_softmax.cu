// A realistic candidate (CUB, cooperative groups, libcu++, fp16/bf16, PTX in device code, macros,
// variables named like libc calls): the static checks must accept it, raw and preprocessed.
#include <kforge/kernel_abi.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <cub/block/block_reduce.cuh>
#include <cuda/std/limits>
#include <cuda/functional>
#include <mma.h>
#include <cfloat>
#include <algorithm>

namespace cg = cooperative_groups;

#define CHECK_CUDA(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) return 3; } while (0)
#define DEVICE __device__ __forceinline__

template <int BLOCK>
__global__ void __launch_bounds__(BLOCK) softmax_rows(const float* __restrict__ x, float* __restrict__ y, int cols) {
  using reduce_t = cub::BlockReduce<float, BLOCK>;
  __shared__ typename reduce_t::TempStorage tmp;
  __shared__ float row_max, row_sum;
  extern __shared__ float cache[];
  const float* xr = x + (size_t)blockIdx.x * cols;
  float m = -cuda::std::numeric_limits<float>::infinity();
  for (int c = threadIdx.x; c < cols; c += BLOCK) { cache[c] = xr[c]; m = fmaxf(m, cache[c]); }
  float bm = reduce_t(tmp).Reduce(m, ::cuda::maximum<>{});
  if (threadIdx.x == 0) row_max = bm;
  __syncthreads();
  float s = 0.f;
  #pragma unroll 4
  for (int c = threadIdx.x; c < cols; c += BLOCK) s += __expf(cache[c] - row_max);
  auto warp = cg::tiled_partition<32>(cg::this_thread_block());
  s = cg::reduce(warp, s, cg::plus<float>());
  if (warp.thread_rank() == 0) atomicAdd(&row_sum, s);
  __syncthreads();
  const int read = 0, write = 1; (void)read; (void)write;
  for (int c = threadIdx.x; c < cols; c += BLOCK) y[(size_t)blockIdx.x * cols + c] = __expf(cache[c] - row_max) / row_sum;
}

DEVICE unsigned lane_id() { unsigned r; asm volatile("mov.u32 %0, %%laneid;" : "=r"(r)); return r; }

__global__ void half_copy(const __half* a, __nv_bfloat16* b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) b[i] = __float2bfloat16(__half2float(a[i]) + (float)(lane_id() & 0));
  float v = __shfl_xor_sync(0xffffffff, 1.f, 1); (void)v;
}

static int blocks_for(int64_t n) { return (int)std::min<int64_t>((n + 255) / 256, 65535); }

extern "C" size_t kf_workspace_bytes(const kf_tensor* inputs, int32_t num_inputs) { return 0; }

extern "C" int kf_forward(const kf_tensor* inputs, int32_t num_inputs, kf_tensor* outputs,
                          int32_t num_outputs, void* workspace, cudaStream_t stream) {
  if (num_inputs != 1 || inputs[0].ndim != 2) return 1;
  const int rows = (int)inputs[0].shape[0], cols = (int)inputs[0].shape[1];
  const size_t smem = cols * sizeof(float);
  if (smem > 48 * 1024)
    CHECK_CUDA(cudaFuncSetAttribute(softmax_rows<256>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  softmax_rows<256><<<rows, 256, smem, stream>>>((const float*)inputs[0].data, (float*)outputs[0].data, cols);
  (void)blocks_for(rows);
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaStreamSynchronize(stream));
  return 0;
}

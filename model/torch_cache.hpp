#pragma once
// torch's CUDA caching allocator keeps every device block it frees for reuse. Processes that share
// a GPU hand those cached free blocks back to the driver: the sandbox's children (the candidate
// child before it reads its own memory for the leak check, the reference server after a large
// task), the engine before `kforge optimize` judges a turn beside it, and the benches between phases.
#if __has_include(<c10/cuda/impl/cuda_cmake_macros.h>)
#include <c10/cuda/CUDACachingAllocator.h>
#define KFORGE_HAVE_C10_CUDA 1
#endif

namespace kforge::model {

/// torch's cached free device blocks back to the driver (only whole free segments can go). A
/// LibTorch without CUDA headers has no such cache: nothing to do.
inline void release_torch_cache() {
#ifdef KFORGE_HAVE_C10_CUDA
  c10::cuda::CUDACachingAllocator::emptyCache();
#endif
}

}  // namespace kforge::model

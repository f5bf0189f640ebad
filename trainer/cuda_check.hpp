#pragma once
// CUDA and NCCL calls go through these macros: they keep the file and line and turn a failure into
// kforge's error value at the boundary, never exit() deep inside. Only GPU translation units
// include this header.

#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

#include "common/result.hpp"

#define KFORGE_CUDA_TRY(expr)                                                               \
  do {                                                                                      \
    const cudaError_t kf_err_ = (expr);                                                     \
    if (kf_err_ != cudaSuccess)                                                             \
      return ::kforge::error{std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": " + \
                             #expr + ": " + cudaGetErrorString(kf_err_)};                   \
  } while (0)

#define KFORGE_NCCL_TRY(expr)                                                               \
  do {                                                                                      \
    const ncclResult_t kf_err_ = (expr);                                                    \
    if (kf_err_ != ncclSuccess)                                                             \
      return ::kforge::error{std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": " + \
                             #expr + ": " + ncclGetErrorString(kf_err_)};                   \
  } while (0)

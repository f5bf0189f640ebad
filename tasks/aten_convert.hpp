#pragma once
// kforge task types to ATen's, for the two translation units that include LibTorch (inputs.cpp,
// reference.cpp). Internal: including it pulls in ATen.

#include <ATen/ATen.h>

#include "tasks/task.hpp"
#include "tasks/tensor_list.hpp"

namespace kforge::tasks::detail {

inline at::ScalarType to_at(dtype t) {
  switch (t) {
    case dtype::float32: return at::kFloat;
    case dtype::float16: return at::kHalf;
    case dtype::bfloat16: return at::kBFloat16;
    case dtype::int32: return at::kInt;
    case dtype::int64: return at::kLong;
    case dtype::boolean: return at::kBool;
  }
  return at::kFloat;
}

inline at::Device to_at(const device& d) {
  return d.type == device::kind::cuda ? at::Device(at::kCUDA, static_cast<at::DeviceIndex>(d.index))
                                      : at::Device(at::kCPU);
}

}  // namespace kforge::tasks::detail

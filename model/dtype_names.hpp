#pragma once
// The dtype names kforge's flags and messages use (PyTorch's own: float32, bfloat16, float16), both
// ways. Includes c10's ScalarType only.

#include <optional>
#include <string>

#include <c10/core/ScalarType.h>

namespace kforge::model {

/// float32, bfloat16 or float16; nullopt for any other name.
inline std::optional<at::ScalarType> dtype_named(const std::string& name) {
  if (name == "float32") return at::kFloat;
  if (name == "bfloat16") return at::kBFloat16;
  if (name == "float16") return at::kHalf;
  return std::nullopt;
}

/// The name dtype_named() reads back; c10's own name for other dtypes.
inline std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kBFloat16: return "bfloat16";
    case at::kHalf: return "float16";
    case at::kFloat: return "float32";
    default: return c10::toString(t);
  }
}

}  // namespace kforge::model

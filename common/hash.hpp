#pragma once
// Stable 64-bit content hashes (FNV-1a): the same bytes give the same hash in every process and on
// every host, which dedup by (prompt_hash, code_hash) and compile caches rely on. Not for security.

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace kforge {

constexpr std::uint64_t fnv1a64(const void* data, std::size_t size,
                                std::uint64_t seed = 14695981039346656037ull) noexcept {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint64_t h = seed;
  for (std::size_t i = 0; i < size; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

inline std::uint64_t fnv1a64(std::string_view s) noexcept { return fnv1a64(s.data(), s.size()); }

}  // namespace kforge

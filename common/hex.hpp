#pragma once
// Bytes as lower-case hex and back, for binary data inside JSON lines (CUDA IPC handles of the
// sandbox's children, TrainBatch messages to trainer rank processes).
#include <cstddef>
#include <string>

namespace kforge {

/// `size` bytes at `data` as 2 * size lower-case hex digits.
inline std::string to_hex(const void* data, std::size_t size) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * size);
  for (std::size_t i = 0; i < size; ++i) {
    const auto b = static_cast<const unsigned char*>(data)[i];
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}
/// Back: false when `text` is not exactly 2 * size hex digits.
inline bool from_hex(const std::string& text, void* data, std::size_t size) {
  if (text.size() != 2 * size) return false;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (std::size_t i = 0; i < size; ++i) {
    const int hi = nibble(text[2 * i]), lo = nibble(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    static_cast<unsigned char*>(data)[i] = static_cast<unsigned char>(hi << 4 | lo);
  }
  return true;
}

}  // namespace kforge

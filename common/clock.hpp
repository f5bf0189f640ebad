#pragma once
// Time stamps carried in messages and recordings: nanoseconds since the Unix epoch (system clock,
// comparable across processes on one host) and a monotonic clock for measuring intervals.

#include <chrono>
#include <cstdint>

namespace kforge {

inline std::int64_t wall_time_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

inline std::int64_t monotonic_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace kforge

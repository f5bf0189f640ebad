#pragma once
// Small helpers for the bus tests: envelopes with checkable contents, and waiting on a condition
// with a deadline (never a sleep).

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "messages/envelope.hpp"

namespace kforge::bus::test {

using namespace std::chrono_literals;
using clock = std::chrono::steady_clock;

/// A Blob envelope whose payload is `size` bytes derived from `id`, so a receiver can check it.
inline messages::envelope blob(std::uint64_t id, std::size_t size = 64, std::uint64_t sample = 0,
                               const std::string& sender = "test") {
  std::vector<std::uint8_t> data(size);
  for (std::size_t i = 0; i < size; ++i) data[i] = static_cast<std::uint8_t>(id * 31 + i);
  return messages::make_blob({id, sample == 0 ? id : sample, sender, 0, 0}, data.data(), size);
}

/// Whether `e` is blob(id, size) (payload included).
inline bool is_blob(const messages::envelope& e, std::uint64_t id, std::size_t size) {
  const auto* b = e.as<messages::wire::Blob>();
  if (!b || !b->data() || b->data()->size() != size || e->message_id() != id) return false;
  for (std::size_t i = 0; i < size; ++i)
    if (b->data()->Get(static_cast<flatbuffers::uoffset_t>(i)) !=
        static_cast<std::uint8_t>(id * 31 + i))
      return false;
  return true;
}

/// Calls `step()` until `done()` holds or `timeout` passes; returns done(). `step` is what makes
/// progress (a poll with its own short timeout), so this never sleeps.
template <class Done, class Step>
bool eventually(Done done, Step step, std::chrono::milliseconds timeout = 5000ms) {
  const auto deadline = clock::now() + timeout;
  while (!done()) {
    if (clock::now() > deadline) return false;
    step();
  }
  return true;
}

}  // namespace kforge::bus::test

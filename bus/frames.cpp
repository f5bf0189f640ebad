#include "bus/frames.hpp"

#include <memory>

namespace kforge::bus {
namespace {

using shared_buffer = std::shared_ptr<const std::vector<std::uint8_t>>;

// Below this size a copy into zmq's own buffer is cheaper than the two small allocations a shared
// frame needs (zmq's content block and the reference holder). Measured with bench/bus_bench.
constexpr std::size_t share_threshold = 1024;

// zmq calls this when the last copy of the frame is gone, on whichever thread that happens.
void release_buffer(void* /*data*/, void* hint) { delete static_cast<shared_buffer*>(hint); }

template <class T>
zmq::message_t le_frame(T v) {
  std::uint8_t b[sizeof(T)];
  for (std::size_t i = 0; i < sizeof(T); ++i) b[i] = static_cast<std::uint8_t>(v >> (8 * i));
  return zmq::message_t(b, sizeof(T));
}

template <class T>
std::optional<T> read_le(const zmq::message_t& frame) noexcept {
  if (frame.size() != sizeof(T)) return std::nullopt;
  const auto* b = frame.data<std::uint8_t>();
  T v = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(b[i]) << (8 * i);
  return v;
}

}  // namespace

zmq::message_t frame_of(const messages::envelope& e) {
  if (e.size() < share_threshold) return zmq::message_t(e.data(), e.size());
  auto holder = std::make_unique<shared_buffer>(e.shared_bytes());
  // zmq only reads a frame it sends; the const_cast is for its C signature.
  void* data = const_cast<std::uint8_t*>((*holder)->data());
  zmq::message_t frame(data, (*holder)->size(), &release_buffer, holder.get());
  holder.release();  // owned by the frame from here; release_buffer deletes it
  return frame;
}

result<messages::envelope> envelope_of(const zmq::message_t& frame) {
  return messages::envelope::from_bytes(frame.data(), frame.size());
}

zmq::message_t u32_frame(std::uint32_t v) { return le_frame(v); }
zmq::message_t u64_frame(std::uint64_t v) { return le_frame(v); }
std::optional<std::uint32_t> read_u32(const zmq::message_t& frame) noexcept {
  return read_le<std::uint32_t>(frame);
}
std::optional<std::uint64_t> read_u64(const zmq::message_t& frame) noexcept {
  return read_le<std::uint64_t>(frame);
}

}  // namespace kforge::bus

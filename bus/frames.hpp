#pragma once
// Envelopes in and out of zmq frames. Outgoing frames share the envelope's bytes instead of copying
// them; incoming frames always pass the FlatBuffers verifier (envelope::adopt / from_bytes) before
// anything reads them, and are kept instead of copied where that is safe.

#include <cstdint>
#include <optional>
#include <string_view>

#include <zmq.hpp>

#include "common/result.hpp"
#include "messages/envelope.hpp"

namespace kforge::bus {

/// A frame carrying `e`'s bytes. Large envelopes are not copied: the frame holds a reference to the
/// envelope's shared buffer until zmq has sent it (possibly on zmq's I/O thread). `e` must be
/// valid.
zmq::message_t frame_of(const messages::envelope& e);

/// Where received frames come from, which decides whether an envelope may keep a frame instead of
/// copying its bytes.
enum class frame_origin {
  /// inproc: every frame owns its buffer (often the sending envelope's own): always kept.
  inproc,
  /// tcp, ipc: zmq may receive a frame of up to 8 KB (its receive batch) as a slice of a buffer
  /// shared with other frames (8 KB of data plus zmq's bookkeeping), which keeping the frame would
  /// pin for the envelope's lifetime; such frames are copied. Larger frames always have a buffer
  /// of their own and are kept.
  stream,
};

/// The origin of frames received on a socket bound or connected to `endpoint`.
frame_origin origin_of(std::string_view endpoint) noexcept;

/// The frame's bytes, copied, as a verified envelope, or the verifier's reason.
result<messages::envelope> envelope_of(const zmq::message_t& frame);
/// Takes the frame as a verified envelope, kept without a copy where `origin` allows (see
/// frame_origin) and its bytes are aligned for FlatBuffers, copied otherwise; or the verifier's
/// reason.
result<messages::envelope> envelope_of(zmq::message_t&& frame, frame_origin origin);

/// Little-endian integers in protocol frames (fixed size, so a short frame is detectable).
zmq::message_t u32_frame(std::uint32_t v);
zmq::message_t u64_frame(std::uint64_t v);
/// The integer in a frame, or nullopt when the frame has the wrong size.
std::optional<std::uint32_t> read_u32(const zmq::message_t& frame) noexcept;
std::optional<std::uint64_t> read_u64(const zmq::message_t& frame) noexcept;

}  // namespace kforge::bus

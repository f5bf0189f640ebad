#pragma once
// Envelopes in and out of zmq frames. Outgoing frames share the envelope's bytes instead of copying
// them; incoming frames always pass envelope::from_bytes (the FlatBuffers verifier) before anything
// reads them.

#include <cstdint>
#include <optional>

#include <zmq.hpp>

#include "common/result.hpp"
#include "messages/envelope.hpp"

namespace kforge::bus {

/// A frame carrying `e`'s bytes. Large envelopes are not copied: the frame holds a reference to the
/// envelope's shared buffer until zmq has sent it (possibly on zmq's I/O thread). `e` must be valid.
zmq::message_t frame_of(const messages::envelope& e);

/// The frame's bytes as a verified envelope, or the verifier's reason.
result<messages::envelope> envelope_of(const zmq::message_t& frame);

/// Little-endian integers in protocol frames (fixed size, so a short frame is detectable).
zmq::message_t u32_frame(std::uint32_t v);
zmq::message_t u64_frame(std::uint64_t v);
/// The integer in a frame, or nullopt when the frame has the wrong size.
std::optional<std::uint32_t> read_u32(const zmq::message_t& frame) noexcept;
std::optional<std::uint64_t> read_u64(const zmq::message_t& frame) noexcept;

}  // namespace kforge::bus

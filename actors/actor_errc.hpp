#pragma once
// The actor layer's error codes as CAF errors, for failures CAF itself reports (deserializing a
// message), with a message naming the reason as the error's context. Failures of stage logic are
// kforge::result values, counted in the stage's metrics: stages forward rather than reply, so
// there is no requester to hand a CAF error to.

#include <cstdint>
#include <string>

#include <caf/error.hpp>
#include <caf/make_message.hpp>

namespace kforge::actors {

/// Why the actor layer refused or failed a message. Code 0 is reserved by CAF for "no error".
enum class actor_errc : std::uint8_t {
  /// The envelope holds another payload than the message type requires.
  wrong_payload = 1,
  /// Bytes failed FlatBuffers verification (e.g. while deserializing a message).
  invalid_envelope,
};

/// The code's name, as CAF prints it: "wrong_payload", ...
std::string to_string(actor_errc code);

/// A CAF error with `code` and a message naming input, field and reason as its context.
caf::error make_actor_error(actor_errc code, std::string message);

}  // namespace kforge::actors

// The category atom is at most 10 characters, as every CAF 0.17 atom.
CAF_ERROR_CODE_ENUM(kforge::actors::actor_errc, "kforge")

#include "actors/payload_msg.hpp"

#include <caf/binary_deserializer.hpp>
#include <caf/deserializer.hpp>
#include <caf/serializer.hpp>

#include "actors/actor_errc.hpp"

namespace kforge::actors {

std::string to_string(actor_errc code) {
  switch (code) {
    case actor_errc::wrong_payload:
      return "wrong_payload";
    case actor_errc::invalid_envelope:
      return "invalid_envelope";
  }
  return "actor_errc(" + std::to_string(static_cast<int>(code)) + ")";
}

caf::error make_actor_error(actor_errc code, std::string message) {
  return caf::make_error(code, std::move(message));
}

status check_payload(const messages::envelope& e, wire::Payload expected) {
  const auto want = messages::payload_name(expected);
  if (!e.valid())
    return error{"empty envelope where a " + std::string(want) + " envelope was expected"};
  if (expected != wire::Payload::NONE && e.type() != expected)
    return error{"expected a " + std::string(want) + " envelope, got " +
                 std::string(messages::payload_name(e.type())) + " (message " +
                 std::to_string(e->message_id()) + " from \"" +
                 (e->sender() ? e->sender()->str() : std::string()) + "\")"};
  return status::success();
}

namespace detail {

// The wire form is CAF's form of a byte sequence (a length, then the bytes), so it matches what
// `f(std::vector<uint8_t>&)` would write; saving avoids that copy. An empty envelope is length 0.
caf::error save_envelope(caf::serializer& f, const messages::envelope& e) {
  auto size = e.size();
  if (auto err = f.begin_sequence(size)) return err;
  if (size > 0)
    if (auto err = f.apply_raw(size, const_cast<std::uint8_t*>(e.data()))) return err;
  return f.end_sequence();
}

caf::error load_envelope(caf::deserializer& f, messages::envelope& e, wire::Payload expected) {
  std::size_t size = 0;
  if (auto err = f.begin_sequence(size)) return err;
  if (size == 0) {
    e = messages::envelope{};
    return f.end_sequence();
  }
  // A hostile length must not make us allocate before reading: bound it by what is there.
  if (auto* bd = dynamic_cast<caf::binary_deserializer*>(&f); bd && size > bd->remaining())
    return make_actor_error(actor_errc::invalid_envelope,
                            "envelope of " + std::to_string(size) + " bytes announced, only " +
                                std::to_string(bd->remaining()) + " bytes left");
  if (size > messages::max_envelope_bytes)
    return make_actor_error(actor_errc::invalid_envelope,
                            "envelope of " + std::to_string(size) + " bytes exceeds the limit");
  std::vector<std::uint8_t> bytes(size);
  if (auto err = f.apply_raw(size, bytes.data())) return err;
  if (auto err = f.end_sequence()) return err;
  auto verified = messages::envelope::from_bytes(std::move(bytes));
  if (!verified.ok())
    return make_actor_error(actor_errc::invalid_envelope, "deserialized " + verified.message());
  if (auto s = check_payload(verified.value(), expected); !s.ok())
    return make_actor_error(actor_errc::wrong_payload, "deserialized " + s.message());
  e = std::move(verified).value();
  return caf::none;
}

std::string describe(const messages::envelope& e) {
  if (!e.valid()) return "empty";
  std::string out(messages::payload_name(e.type()));
  out += " message_id=" + std::to_string(e->message_id());
  out += " sample_id=" + std::to_string(e->sample_id());
  out += " sender=" + (e->sender() ? e->sender()->str() : std::string());
  out += " policy_version=" + std::to_string(e->policy_version());
  out += " bytes=" + std::to_string(e.size());
  return out;
}

}  // namespace detail
}  // namespace kforge::actors

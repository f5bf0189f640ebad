#pragma once
// CAF message types around verified envelopes. A payload_msg<T> can only be made from an envelope
// whose payload is a T, so a stage handler that receives a candidate_msg never has to check what it
// holds. Copies share the envelope's bytes (a reference count), as envelopes do.
//
// CAF serialization writes the envelope's bytes; reading them back verifies them again and checks
// the payload type, so bytes from another process are never trusted because CAF carried them.

#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include <caf/error.hpp>
#include <caf/fwd.hpp>
#include <caf/meta/type_name.hpp>

#include "common/result.hpp"
#include "messages/envelope.hpp"

namespace kforge::actors {

namespace wire = ::kforge::wire;

/// Success when `e` is valid and holds a payload of `expected` (wire::Payload::NONE: any);
/// otherwise an error naming both payload types.
status check_payload(const messages::envelope& e, wire::Payload expected);

namespace detail {

caf::error save_envelope(caf::serializer& f, const messages::envelope& e);
caf::error load_envelope(caf::deserializer& f, messages::envelope& e, wire::Payload expected);
/// One line for CAF's to_string: payload type and header fields, never the payload bytes.
std::string describe(const messages::envelope& e);

/// The one inspect body behind every envelope-carrying CAF type. CAF 0.17 calls inspect with
/// caf::serializer, caf::deserializer or its stringification inspector (result_type void).
template <class Inspector>
typename Inspector::result_type inspect_envelope(Inspector& f, messages::envelope& e,
                                                 wire::Payload expected) {
  if constexpr (std::is_void<typename Inspector::result_type>::value) {
    return f(caf::meta::type_name("envelope"), describe(e));
  } else if constexpr (Inspector::reads_state) {
    return save_envelope(f, e);
  } else {
    return load_envelope(f, e, expected);
  }
}

}  // namespace detail

/// An envelope known to hold a `Table` payload (wire::Candidate, wire::Verdict, ...).
/// Default-constructed it is empty (CAF needs that); stage handlers count an empty one as an error.
template <class Table>
class payload_msg {
 public:
  using table_type = Table;
  using native_type = typename Table::NativeTableType;
  static constexpr wire::Payload payload_type = wire::PayloadTraits<Table>::enum_value;

  payload_msg() = default;

  /// The checked way in: an error when `e` is empty or holds another payload.
  static result<payload_msg> make(messages::envelope e) {
    if (auto s = check_payload(e, payload_type); !s.ok()) return s.err();
    return payload_msg(std::move(e));
  }

  /// Builds the envelope from an object-API payload; the static type guarantees the payload.
  static payload_msg pack(const messages::header& h, const native_type& payload) {
    return payload_msg(messages::pack(h, payload));
  }

  bool valid() const noexcept { return env_.valid(); }
  /// The payload table. Precondition: valid().
  const Table& payload() const noexcept { return *env_.as<Table>(); }
  /// The whole envelope table, for the header fields. Precondition: valid().
  const wire::Envelope& header() const noexcept { return env_.get(); }
  const messages::envelope& envelope() const noexcept { return env_; }

  friend bool operator==(const payload_msg& a, const payload_msg& b) noexcept {
    return a.env_ == b.env_;
  }
  friend bool operator!=(const payload_msg& a, const payload_msg& b) noexcept {
    return !(a == b);
  }

  template <class Inspector>
  friend typename Inspector::result_type inspect(Inspector& f, payload_msg& x) {
    return detail::inspect_envelope(f, x.env_, payload_type);
  }

 private:
  explicit payload_msg(messages::envelope e) : env_(std::move(e)) {}
  messages::envelope env_;
};

/// One message type per payload the stages exchange.
using task_msg = payload_msg<wire::Task>;
using generate_request_msg = payload_msg<wire::GenerateRequest>;
using candidate_msg = payload_msg<wire::Candidate>;
using verdict_msg = payload_msg<wire::Verdict>;
using scored_msg = payload_msg<wire::Scored>;
using train_batch_msg = payload_msg<wire::TrainBatch>;
using policy_weights_msg = payload_msg<wire::PolicyWeights>;
using control_msg = payload_msg<wire::Control>;

}  // namespace kforge::actors

namespace kforge::messages {

/// CAF inspection of a plain envelope (any payload), the type bus bridges hand to stages. It lives
/// here for argument-dependent lookup; messages/ itself knows nothing of CAF.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, envelope& x) {
  return ::kforge::actors::detail::inspect_envelope(f, x, wire::Payload::NONE);
}

}  // namespace kforge::messages

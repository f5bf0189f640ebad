#pragma once
// Stage-to-stage flow: a sender (PUSH) and a receiver (PULL) of envelopes. PUSH waits when every
// peer is at its high-water mark, so send() takes a timeout and fails loudly past it: a blocked
// stage is an error value, never a silently dropped message.
//
// Wire: one frame per message, the envelope's FlatBuffer bytes. Anything else (more frames, bytes
// that fail verification) is rejected and counted.
//
// Each object owns its socket; use it from one thread at a time (moving it to another thread is
// fine). Only the context is shared.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <zmq.hpp>

#include "bus/context.hpp"
#include "bus/socket.hpp"
#include "common/result.hpp"
#include "messages/envelope.hpp"

namespace kforge::bus {

/// Options of one channel end.
struct channel_options {
  /// Messages queued per peer before a sender waits (PUSH) or the receiver stops reading (PULL).
  int high_water_mark = 1000;
};

/// What one channel end has done. Counts only; the owner reads them from its own thread.
struct channel_counters {
  std::uint64_t sent = 0;           ///< envelopes handed to zmq
  std::uint64_t send_timeouts = 0;  ///< sends that found no room within their timeout
  std::uint64_t received = 0;       ///< verified envelopes returned
  std::uint64_t rejected = 0;       ///< received messages that were not one valid envelope
};

/// The sending end of a stage-to-stage link (PUSH). Load-balances over connected receivers.
class sender {
 public:
  /// Opens a PUSH socket and binds or connects it.
  static result<sender> open(const attach_point& where, const channel_options& opts = {},
                             zmq::context_t& ctx = shared_context());
  static result<sender> bind(std::string_view endpoint, const channel_options& opts = {},
                             zmq::context_t& ctx = shared_context()) {
    return open({std::string(endpoint), link::bind}, opts, ctx);
  }
  static result<sender> connect(std::string_view endpoint, const channel_options& opts = {},
                                zmq::context_t& ctx = shared_context()) {
    return open({std::string(endpoint), link::connect}, opts, ctx);
  }

  /// Queues `e` for sending, waiting up to `timeout` for room (negative: forever). An error when
  /// there was no room in time (no peer connected, or peers not reading); nothing is sent then.
  status send(const messages::envelope& e, std::chrono::milliseconds timeout);

  /// The endpoint as bound or connected; for a bind to tcp://HOST:* it holds the chosen port.
  const std::string& last_endpoint() const noexcept { return endpoint_; }
  const channel_counters& counters() const noexcept { return counters_; }
  /// The socket, for polling together with others (zmq::poll). Send only through send().
  zmq::socket_ref handle() noexcept { return socket_; }

 private:
  sender(zmq::socket_t s, std::string endpoint)
      : socket_(std::move(s)), endpoint_(std::move(endpoint)) {}
  zmq::socket_t socket_;
  std::string endpoint_;
  channel_counters counters_;
  int send_timeout_ms_ = -1;  // SNDTIMEO as last set (zmq's default is -1)
};

/// The receiving end of a stage-to-stage link (PULL). Fair-queues over connected senders.
class receiver {
 public:
  /// Opens a PULL socket and binds or connects it.
  static result<receiver> open(const attach_point& where, const channel_options& opts = {},
                               zmq::context_t& ctx = shared_context());
  static result<receiver> bind(std::string_view endpoint, const channel_options& opts = {},
                               zmq::context_t& ctx = shared_context()) {
    return open({std::string(endpoint), link::bind}, opts, ctx);
  }
  static result<receiver> connect(std::string_view endpoint, const channel_options& opts = {},
                                  zmq::context_t& ctx = shared_context()) {
    return open({std::string(endpoint), link::connect}, opts, ctx);
  }

  /// The next envelope, waiting up to `timeout` (negative: forever; zero: only what is queued).
  /// nullopt: nothing arrived in time. An error: a message arrived but was not one valid envelope
  /// (counted in `rejected`; the receiver stays usable) or the socket failed.
  result<std::optional<messages::envelope>> receive(std::chrono::milliseconds timeout);

  /// The endpoint as bound or connected; for a bind to tcp://HOST:* it holds the chosen port.
  const std::string& last_endpoint() const noexcept { return endpoint_; }
  const channel_counters& counters() const noexcept { return counters_; }
  /// The socket, for polling together with others (zmq::poll). Receive only through receive().
  zmq::socket_ref handle() noexcept { return socket_; }

 private:
  receiver(zmq::socket_t s, std::string endpoint);
  // Verifies one received frame (kept as the envelope's bytes where that is safe) and counts it.
  result<std::optional<messages::envelope>> accept(zmq::message_t&& frame);
  zmq::socket_t socket_;
  std::string endpoint_;
  bool inproc_;  // frames come from inproc peers only: they can be kept without a copy
  channel_counters counters_;
  int receive_timeout_ms_ = -1;  // RCVTIMEO as last set (zmq's default is -1)
};

}  // namespace kforge::bus

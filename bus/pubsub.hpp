#pragma once
// Publish/subscribe for policy weights and control: one publisher, any number of subscribers that
// each get every message whose topic starts with a prefix they subscribed to.
//
// Wire: two frames per message, [topic, envelope]. The topic is a short name that subscribers
// filter on by prefix: a channel name ("weights", "control") or payload_name(e.type()).
//
// The publisher is an XPUB with XPUB_NODROP and XPUB_VERBOSE: a subscriber at its high-water mark
// makes publish() wait (then fail) instead of zmq's silent drop, and the publisher sees each
// subscription, so a caller can wait until subscribers are attached instead of sleeping
// (zguide's "slow joiner").

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <zmq.hpp>

#include "bus/context.hpp"
#include "bus/socket.hpp"
#include "common/result.hpp"
#include "messages/envelope.hpp"

namespace kforge::bus {

/// Options of one publish/subscribe end.
struct pubsub_options {
  /// Messages queued per subscriber before publish() waits (publisher) or reading stops.
  int high_water_mark = 1000;
};

/// One received message: its topic and verified envelope.
struct topic_message {
  std::string topic;
  messages::envelope env;
};

/// What one end has done. Counts only; the owner reads them from its own thread.
struct pubsub_counters {
  std::uint64_t published = 0;         ///< messages handed to zmq
  std::uint64_t publish_timeouts = 0;  ///< publishes refused because a subscriber was full
  std::uint64_t subscriptions = 0;     ///< subscribe notifications seen by the publisher
  std::uint64_t received = 0;          ///< verified messages returned by a subscriber
  std::uint64_t rejected = 0;          ///< messages that were not [topic, valid envelope]
};

/// The publishing end (XPUB).
class publisher {
 public:
  static result<publisher> open(const attach_point& where, const pubsub_options& opts = {},
                                zmq::context_t& ctx = shared_context());
  static result<publisher> bind(std::string_view endpoint, const pubsub_options& opts = {},
                                zmq::context_t& ctx = shared_context()) {
    return open({std::string(endpoint), link::bind}, opts, ctx);
  }

  /// Sends `e` under `topic` to every matching subscriber, waiting up to `timeout` while one of
  /// them is full. On timeout nobody gets it and an error says so; with no subscriber at all the
  /// message goes nowhere, as PUB/SUB intends.
  status publish(std::string_view topic, const messages::envelope& e,
                 std::chrono::milliseconds timeout = std::chrono::milliseconds(0));

  /// Waits up to `timeout` until at least `n` subscriptions in total have reached this
  /// publisher (each subscriber's subscribe to each prefix counts once). True when they have:
  /// from then on those subscribers receive what is published.
  result<bool> wait_for_subscriptions(std::uint64_t n, std::chrono::milliseconds timeout);

  const std::string& last_endpoint() const noexcept { return endpoint_; }
  const pubsub_counters& counters() const noexcept { return counters_; }
  zmq::socket_ref handle() noexcept { return socket_; }

 private:
  publisher(zmq::socket_t s, std::string endpoint)
      : socket_(std::move(s)), endpoint_(std::move(endpoint)) {}
  // Reads the subscription notifications zmq has queued, waiting up to `timeout` for the first.
  status drain_subscriptions(std::chrono::milliseconds timeout);
  zmq::socket_t socket_;
  std::string endpoint_;
  pubsub_counters counters_;
};

/// The subscribing end (SUB).
class subscriber {
 public:
  /// Opens a SUB socket subscribed to each prefix in `topics` ("" = everything).
  static result<subscriber> open(const attach_point& where, const std::vector<std::string>& topics,
                                 const pubsub_options& opts = {},
                                 zmq::context_t& ctx = shared_context());
  static result<subscriber> connect(std::string_view endpoint,
                                    const std::vector<std::string>& topics,
                                    const pubsub_options& opts = {},
                                    zmq::context_t& ctx = shared_context()) {
    return open({std::string(endpoint), link::connect}, topics, opts, ctx);
  }

  /// Adds a topic prefix.
  status subscribe(std::string_view prefix);

  /// The next message, waiting up to `timeout` (negative: forever). nullopt: none in time. An
  /// error: a message that was not [topic, valid envelope] (counted; the subscriber stays usable).
  result<std::optional<topic_message>> receive(std::chrono::milliseconds timeout);

  const std::string& last_endpoint() const noexcept { return endpoint_; }
  const pubsub_counters& counters() const noexcept { return counters_; }
  zmq::socket_ref handle() noexcept { return socket_; }

 private:
  subscriber(zmq::socket_t s, std::string endpoint)
      : socket_(std::move(s)), endpoint_(std::move(endpoint)) {}
  zmq::socket_t socket_;
  std::string endpoint_;
  pubsub_counters counters_;
};

}  // namespace kforge::bus

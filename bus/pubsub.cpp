#include "bus/pubsub.hpp"

#include "bus/frames.hpp"

namespace kforge::bus {

using std::chrono::milliseconds;

result<publisher> publisher::open(const attach_point& where, const pubsub_options& opts,
                                  zmq::context_t& ctx) {
  auto s = open_socket(ctx, zmq::socket_type::xpub, {opts.high_water_mark, opts.high_water_mark});
  if (!s) return s.err();
  try {
    s->set(zmq::sockopt::xpub_nodrop, true);
    s->set(zmq::sockopt::xpub_verbose, true);
  } catch (const zmq::error_t& e) {
    return error{std::string("bus: cannot configure a publisher: ") + e.what()};
  }
  auto ep = attach(*s, where);
  if (!ep) return ep.err();
  return publisher(std::move(s).value(), std::move(ep).value());
}

status publisher::drain_subscriptions(milliseconds timeout) {
  std::vector<zmq::message_t> frames;
  for (auto wait = timeout;; wait = milliseconds(0)) {
    auto n = receive_within(socket_, frames, 1, wait);
    if (!n) return error{"bus: publisher on " + endpoint_ + ": " + n.message()};
    if (*n == 0) return status::success();
    // XPUB hands up "\x01prefix" for a subscribe and "\x00prefix" for an unsubscribe.
    if (*n == 1 && frames[0].size() >= 1 && frames[0].data<std::uint8_t>()[0] == 1)
      ++counters_.subscriptions;
  }
}

status publisher::publish(std::string_view topic, const messages::envelope& e,
                          milliseconds timeout) {
  if (!e.valid())
    return error{"bus: publisher on " + endpoint_ + ": cannot publish an empty envelope"};
  // Subscriptions queue up inside zmq until read; reading them here keeps that bounded.
  if (auto s = drain_subscriptions(milliseconds(0)); !s) return s;
  zmq::message_t frames[2] = {zmq::message_t(topic.data(), topic.size()), frame_of(e)};
  auto sent = send_within(socket_, frames, 2, timeout);
  if (!sent) return error{"bus: publisher on " + endpoint_ + ": " + sent.message()};
  if (!*sent) {
    ++counters_.publish_timeouts;
    return error{"bus: publisher on " + endpoint_ + ": a subscriber of \"" + std::string(topic) +
                 "\" stayed at its high-water mark for " + std::to_string(timeout.count()) +
                 " ms; envelope " + std::to_string(e->message_id()) + " was sent to no one"};
  }
  ++counters_.published;
  return status::success();
}

result<bool> publisher::wait_for_subscriptions(std::uint64_t n, milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (counters_.subscriptions < n) {
    const auto left = std::chrono::ceil<milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    if (auto s = drain_subscriptions(left); !s) return s.err();
  }
  return true;
}

result<subscriber> subscriber::open(const attach_point& where,
                                    const std::vector<std::string>& topics,
                                    const pubsub_options& opts, zmq::context_t& ctx) {
  auto s = open_socket(ctx, zmq::socket_type::sub, {opts.high_water_mark, opts.high_water_mark});
  if (!s) return s.err();
  auto ep = attach(*s, where);
  if (!ep) return ep.err();
  subscriber sub(std::move(s).value(), std::move(ep).value());
  for (const auto& t : topics)
    if (auto st = sub.subscribe(t); !st) return st.err();
  return sub;
}

status subscriber::subscribe(std::string_view prefix) {
  try {
    socket_.set(zmq::sockopt::subscribe, prefix);
    return status::success();
  } catch (const zmq::error_t& e) {
    return error{"bus: subscriber on " + endpoint_ + ": cannot subscribe to \"" +
                 std::string(prefix) + "\": " + e.what()};
  }
}

result<std::optional<topic_message>> subscriber::receive(milliseconds timeout) {
  std::vector<zmq::message_t> frames;
  frames.reserve(3);
  auto n = receive_within(socket_, frames, 3, timeout);
  if (!n) return error{"bus: subscriber on " + endpoint_ + ": " + n.message()};
  if (*n == 0) return std::optional<topic_message>{};
  if (*n != 2) {
    ++counters_.rejected;
    return error{"bus: subscriber on " + endpoint_ + ": rejected a message of " +
                 std::to_string(*n) + " frames (expected [topic, envelope])"};
  }
  auto e = envelope_of(frames[1]);
  if (!e) {
    ++counters_.rejected;
    return error{"bus: subscriber on " + endpoint_ + ": rejected a message on topic \"" +
                 frames[0].to_string() + "\": " + e.message()};
  }
  ++counters_.received;
  return std::optional<topic_message>(topic_message{frames[0].to_string(), std::move(e).value()});
}

}  // namespace kforge::bus

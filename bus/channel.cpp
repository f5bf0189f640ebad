#include "bus/channel.hpp"

#include <limits>

#include "bus/frames.hpp"

namespace kforge::bus {

result<sender> sender::open(const attach_point& where, const channel_options& opts,
                            zmq::context_t& ctx) {
  auto s = open_socket(ctx, zmq::socket_type::push, {opts.high_water_mark, opts.high_water_mark});
  if (!s) return s.err();
  auto ep = attach(*s, where);
  if (!ep) return ep.err();
  return sender(std::move(s).value(), std::move(ep).value());
}

namespace {

// zmq takes int milliseconds, -1 for "forever".
int timeout_ms(std::chrono::milliseconds t) {
  if (t.count() < 0) return -1;
  return t.count() > std::numeric_limits<int>::max() ? std::numeric_limits<int>::max()
                                                     : static_cast<int>(t.count());
}

}  // namespace

status sender::send(const messages::envelope& e, std::chrono::milliseconds timeout) {
  if (!e.valid()) return error{"bus: sender on " + endpoint_ + ": cannot send an empty envelope"};
  auto frame = frame_of(e);
  try {
    // A blocking send bounded by SNDTIMEO waits inside zmq exactly as a raw send does, with fewer
    // system calls than try / zmq_poll / retry; the option is only set when it changes.
    const int ms = timeout_ms(timeout);
    if (ms != send_timeout_ms_) {
      socket_.set(zmq::sockopt::sndtimeo, ms);
      send_timeout_ms_ = ms;
    }
    if (socket_.send(frame, zmq::send_flags::none)) {
      ++counters_.sent;
      return status::success();
    }
  } catch (const zmq::error_t& err) {
    if (err.num() != EINTR)
      return error{"bus: sender on " + endpoint_ + ": send failed: " + err.what()};
  }
  ++counters_.send_timeouts;
  return error{"bus: sender on " + endpoint_ + ": no room to send envelope " +
               std::to_string(e->message_id()) + " within " + std::to_string(timeout.count()) +
               " ms (no receiver connected, or receivers at their high-water mark)"};
}

result<receiver> receiver::open(const attach_point& where, const channel_options& opts,
                                zmq::context_t& ctx) {
  auto s = open_socket(ctx, zmq::socket_type::pull, {opts.high_water_mark, opts.high_water_mark});
  if (!s) return s.err();
  auto ep = attach(*s, where);
  if (!ep) return ep.err();
  return receiver(std::move(s).value(), std::move(ep).value());
}

receiver::receiver(zmq::socket_t s, std::string endpoint)
    : socket_(std::move(s)),
      endpoint_(std::move(endpoint)),
      inproc_(origin_of(endpoint_) == frame_origin::inproc) {}

result<std::optional<messages::envelope>> receiver::receive(std::chrono::milliseconds timeout) {
  std::size_t n = 0;
  try {
    // As in send(): a blocking receive bounded by RCVTIMEO, like a raw zmq receive.
    const int ms = timeout_ms(timeout);
    if (ms != receive_timeout_ms_) {
      socket_.set(zmq::sockopt::rcvtimeo, ms);
      receive_timeout_ms_ = ms;
    }
    zmq::message_t frame;
    if (!socket_.recv(frame, zmq::recv_flags::none)) return std::optional<messages::envelope>{};
    if (!frame.more()) return accept(std::move(frame));
    // A multi-frame message: read the rest (already here: zmq delivers messages whole) so the
    // next receive starts on a message boundary.
    for (n = 1; frame.more(); ++n)
      if (!socket_.recv(frame, zmq::recv_flags::dontwait)) break;
  } catch (const zmq::error_t& e) {
    // EINTR: a signal arrived while waiting; the caller's loop decides whether to wait again.
    if (e.num() == EINTR) return std::optional<messages::envelope>{};
    return error{"bus: receiver on " + endpoint_ + ": receive failed: " + e.what()};
  }
  ++counters_.rejected;
  return error{"bus: receiver on " + endpoint_ + ": rejected a message of " + std::to_string(n) +
               " frames (a channel message is one envelope frame)"};
}

result<std::optional<messages::envelope>> receiver::accept(zmq::message_t&& frame) {
  const std::size_t size = frame.size();
  auto e = envelope_of(std::move(frame), inproc_ ? frame_origin::inproc : frame_origin::stream);
  if (!e) {
    ++counters_.rejected;
    return error{"bus: receiver on " + endpoint_ + ": rejected " + std::to_string(size) +
                 " bytes: " + e.message()};
  }
  ++counters_.received;
  return std::optional<messages::envelope>(std::move(e).value());
}

}  // namespace kforge::bus

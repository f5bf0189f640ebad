#include "bus/socket.hpp"

#include "bus/endpoint.hpp"

namespace kforge::bus {

std::string_view link_name(link how) noexcept { return how == link::bind ? "bind" : "connect"; }

result<zmq::socket_t> open_socket(zmq::context_t& ctx, zmq::socket_type type,
                                  const socket_options& opts) {
  try {
    zmq::socket_t s(ctx, type);
    // LINGER=0: a closed socket drops what it had queued at once; delivery guarantees come from
    // the protocols above (timeouts, counters, re-queueing), not from a close that may hang.
    s.set(zmq::sockopt::linger, 0);
    s.set(zmq::sockopt::sndhwm, opts.send_hwm);
    s.set(zmq::sockopt::rcvhwm, opts.recv_hwm);
    return s;
  } catch (const zmq::error_t& e) {
    return error{std::string("bus: cannot open a socket: ") + e.what()};
  }
}

result<std::string> attach(zmq::socket_t& s, const attach_point& where) {
  auto ep =
      where.how == link::bind ? parse_endpoint(where.endpoint) : parse_connectable(where.endpoint);
  if (!ep) return ep.err();
  try {
    if (where.how == link::bind) {
      s.bind(ep->text);
      return s.get(zmq::sockopt::last_endpoint);
    }
    s.connect(ep->text);
    return ep->text;
  } catch (const zmq::error_t& e) {
    return error{"bus: cannot " + std::string(link_name(where.how)) + " " + where.endpoint + ": " +
                 e.what()};
  }
}

result<bool> wait_ready(zmq::socket_t& s, short events, std::chrono::milliseconds timeout) {
  zmq_pollitem_t item{s.handle(), 0, events, 0};
  try {
    return zmq::poll(&item, 1, timeout.count() < 0 ? std::chrono::milliseconds(-1) : timeout) > 0;
  } catch (const zmq::error_t& e) {
    // EINTR: a signal arrived; report "not ready" and let the caller's deadline loop retry.
    if (e.num() == EINTR) return false;
    return error{std::string("bus: poll failed: ") + e.what()};
  }
}

}  // namespace kforge::bus

namespace kforge::bus {
namespace {

using clock = std::chrono::steady_clock;

// Time left until `deadline`, or -1 (wait forever) when there is none.
std::chrono::milliseconds left(bool forever, clock::time_point deadline) {
  if (forever) return std::chrono::milliseconds(-1);
  auto d = std::chrono::ceil<std::chrono::milliseconds>(deadline - clock::now());
  return d.count() < 0 ? std::chrono::milliseconds(0) : d;
}

}  // namespace

result<bool> send_within(zmq::socket_t& s, zmq::message_t* frames, std::size_t count,
                         std::chrono::milliseconds timeout) {
  const bool forever = timeout.count() < 0;
  const auto deadline = clock::now() + (forever ? std::chrono::milliseconds(0) : timeout);
  try {
    for (;;) {
      const auto first = count > 1 ? zmq::send_flags::dontwait | zmq::send_flags::sndmore
                                   : zmq::send_flags::dontwait;
      if (s.send(frames[0], first)) {
        // Once the first frame is accepted zmq accepts the rest of the message.
        for (std::size_t i = 1; i < count; ++i)
          (void)s.send(frames[i], i + 1 < count ? zmq::send_flags::sndmore : zmq::send_flags::none);
        return true;
      }
      const auto wait = left(forever, deadline);
      if (wait.count() == 0) return false;
      auto ready = wait_ready(s, ZMQ_POLLOUT, wait);
      if (!ready) return ready.err();
    }
  } catch (const zmq::error_t& e) {
    return error{std::string("bus: send failed: ") + e.what()};
  }
}

result<std::size_t> receive_within(zmq::socket_t& s, std::vector<zmq::message_t>& frames,
                                   std::size_t max_frames, std::chrono::milliseconds timeout) {
  frames.clear();
  const bool forever = timeout.count() < 0;
  const auto deadline = clock::now() + (forever ? std::chrono::milliseconds(0) : timeout);
  try {
    zmq::message_t frame;
    for (;;) {
      if (s.recv(frame, zmq::recv_flags::dontwait)) break;
      const auto wait = left(forever, deadline);
      if (wait.count() == 0) return std::size_t{0};
      auto ready = wait_ready(s, ZMQ_POLLIN, wait);
      if (!ready) return ready.err();
    }
    std::size_t n = 1;
    bool more = frame.more();
    if (max_frames > 0) frames.push_back(std::move(frame));
    // The rest of a message is already here: zmq delivers messages whole.
    while (more) {
      zmq::message_t part;
      (void)s.recv(part, zmq::recv_flags::none);
      more = part.more();
      if (n++ < max_frames) frames.push_back(std::move(part));
    }
    return n;
  } catch (const zmq::error_t& e) {
    return error{std::string("bus: receive failed: ") + e.what()};
  }
}

}  // namespace kforge::bus

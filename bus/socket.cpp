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
  auto ep = where.how == link::bind ? parse_endpoint(where.endpoint)
                                    : parse_connectable(where.endpoint);
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

#pragma once
// Socket set-up shared by every bus class: one place sets LINGER=0 and explicit high-water marks,
// checks the endpoint, binds or connects, and turns zmq exceptions into error values.

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include <zmq.hpp>

#include "common/result.hpp"

namespace kforge::bus {

/// How a socket attaches to its endpoint.
enum class link { bind, connect };

/// An endpoint and whether to bind or connect it.
struct attach_point {
  std::string endpoint;  ///< e.g. "tcp://127.0.0.1:*" (bind) or "inproc://results"
  link how = link::bind;
};

/// Queue limits of one socket, always set explicitly: what happens at the limit differs by type
/// (PUSH and DEALER wait, PUB and ROUTER drop unless told not to), so the limit is a choice.
struct socket_options {
  int send_hwm = 1000;  ///< messages queued per peer for sending
  int recv_hwm = 1000;  ///< messages queued per peer for receiving
};

/// A new socket of `type` with LINGER=0 and the given high-water marks.
result<zmq::socket_t> open_socket(zmq::context_t& ctx, zmq::socket_type type,
                                  const socket_options& opts);

/// Checks `where.endpoint` and binds or connects `s` to it. Returns the endpoint as resolved: for
/// a bind to tcp://HOST:* or ipc://* the address the OS chose (ZMQ_LAST_ENDPOINT), else the input.
result<std::string> attach(zmq::socket_t& s, const attach_point& where);

/// Waits until `s` has any of `events` (ZMQ_POLLIN / ZMQ_POLLOUT) or `timeout` passes; a negative
/// timeout waits forever. True when ready.
result<bool> wait_ready(zmq::socket_t& s, short events, std::chrono::milliseconds timeout);

/// Sends the frames of one message, waiting up to `timeout` for room (negative: forever). True
/// when sent, false when there was no room in time (then nothing was sent: zmq sends the frames
/// of a message all or none). zmq errors other than would-block are returned as errors.
result<bool> send_within(zmq::socket_t& s, zmq::message_t* frames, std::size_t count,
                         std::chrono::milliseconds timeout);

/// Receives one whole message, waiting up to `timeout` (negative: forever). Keeps at most
/// `max_frames` frames in `frames` (cleared first) and returns how many the message had, so an
/// oversized message is detectable without being kept; 0 means nothing arrived in time.
result<std::size_t> receive_within(zmq::socket_t& s, std::vector<zmq::message_t>& frames,
                                   std::size_t max_frames, std::chrono::milliseconds timeout);

/// "bind" or "connect".
std::string_view link_name(link how) noexcept;

}  // namespace kforge::bus

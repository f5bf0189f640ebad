#pragma once
// The worker side of the broker protocol (broker_protocol.hpp): a process or thread uses one to
// take work from a broker and send results back.
//
// Everything happens on the owner's thread: next() and tick() poll the socket with a timeout and
// send heartbeats when due, so there is no hidden thread sharing the socket. Work that takes
// longer than a heartbeat interval must call tick() now and then, or the broker will declare the
// worker dead and hand its items to someone else (whose results then win; this worker's late
// results are dropped by the broker).
//
// When the broker is silent for `liveness` intervals (or says RECONNECT), the worker drops the
// items it holds (the broker re-queues them), closes its socket, and after a back-off opens a new
// one and sends READY again. Destroying a worker just closes its socket, like a crash: use leave()
// to tell the broker first.

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include <zmq.hpp>

#include "bus/context.hpp"
#include "common/result.hpp"
#include "messages/envelope.hpp"

namespace kforge::bus {

/// Worker configuration.
struct worker_options {
  std::string name = "worker";  ///< shown in the broker's failure reasons
  std::uint32_t capacity = 1;   ///< items held at once (the credit sent in READY)
  /// How often the worker sends HEARTBEAT; the broker uses it to judge this worker's silence.
  std::chrono::milliseconds heartbeat_interval{1000};
  /// Missed broker intervals before the worker gives up on the connection and rebuilds it.
  int liveness = 5;
  /// Back-off before reconnecting, doubling up to the maximum while the broker stays away.
  std::chrono::milliseconds reconnect_initial{250};
  std::chrono::milliseconds reconnect_max{8000};
  int high_water_mark = 1000;  ///< per socket
};

/// One item of work: the broker's id for it (the envelope's message_id) and the envelope.
struct work_item {
  std::uint64_t id = 0;
  messages::envelope work;
};

/// What the worker has done.
struct worker_counters {
  std::uint64_t received = 0;    ///< work items taken from the broker
  std::uint64_t completed = 0;   ///< results sent
  std::uint64_t rejected = 0;    ///< broker messages that broke the protocol or failed verification
  std::uint64_t reconnects = 0;  ///< sockets rebuilt
  std::uint64_t abandoned = 0;   ///< items dropped because their session was lost
};

class worker {
 public:
  /// Opens a DEALER, connects to the broker's backend and sends READY.
  static result<worker> connect(std::string_view broker_endpoint, worker_options opts = {},
                                zmq::context_t& ctx = shared_context());

  worker(worker&&) noexcept = default;
  worker& operator=(worker&&) noexcept = default;
  ~worker() = default;

  /// The next work item, waiting up to `timeout` and keeping the connection alive meanwhile.
  /// nullopt: nothing in time. An error only when the socket itself fails.
  result<std::optional<work_item>> next(std::chrono::milliseconds timeout);

  /// Sends the result of item `work_id` (which frees its credit). An error when this worker does
  /// not hold the item (never received, already completed, or dropped with a lost session).
  status complete(std::uint64_t work_id, const messages::envelope& result);

  /// Heartbeats and reads pending broker messages without waiting; call during long work.
  status tick();

  /// Says DISCONNECT and closes the socket; items still held are re-queued by the broker.
  /// Best effort (LINGER=0 may drop the DISCONNECT): the broker also notices the closed
  /// connection or the silence. The worker reconnects on the next next()/tick().
  status leave();

  /// Items received and not yet completed (including ones next() has not returned yet).
  std::size_t held() const noexcept { return held_.size(); }
  const worker_counters& counters() const noexcept { return counters_; }
  const std::string& endpoint() const noexcept { return endpoint_; }

 private:
  using clock = std::chrono::steady_clock;
  worker(zmq::context_t& ctx, std::string endpoint, worker_options opts);
  status open_session();
  void drop_session();
  status service(clock::time_point deadline, bool until_work);
  status handle(std::size_t n, std::vector<zmq::message_t>& frames);
  status send_command(std::uint8_t cmd);

  zmq::context_t* ctx_;
  std::string endpoint_;
  worker_options opts_;
  std::optional<zmq::socket_t> socket_;  // empty while waiting to reconnect
  std::deque<work_item> inbox_;
  std::unordered_set<std::uint64_t> held_;
  clock::time_point next_heartbeat_;
  clock::time_point broker_expiry_;
  clock::time_point reconnect_at_;
  std::chrono::milliseconds backoff_;
  worker_counters counters_;
};

}  // namespace kforge::bus

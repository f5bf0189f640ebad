#pragma once
// A load-balancing broker for a pool of workers (zguide's Paranoid Pirate pattern, with credit).
//
//   producers --PUSH--> [frontend PULL]  broker  [backend ROUTER] <--DEALER-- workers
//                                           |
//                                           +--PUSH--> [result sink] --> consumer
//
// - Frontend: a PULL socket taking work envelopes (one frame each, as bus::sender sends them). A
//   PULL rather than a ROUTER because producers need no reply: results go to a sink, not back to
//   the producer. It also gives back-pressure for free: while `max_queued` items wait, the broker
//   stops reading the frontend, so producers' sends wait and then time out.
// - Backend: a ROUTER speaking broker_protocol.hpp with worker DEALERs, with ROUTER_MANDATORY so a
//   send to a worker that is gone fails (and the worker is declared dead) instead of vanishing.
// - Result sink: a PUSH that sends each result envelope once (a bus::receiver reads it). A result
//   the sink cannot take yet waits in the broker; nothing is dropped.
//
// A work item is identified by its envelope's message_id; results should carry the work's
// sample_id (the trace id) so a consumer can match them. A worker that is silent for `liveness`
// heartbeat intervals or becomes unroutable is declared dead (workers_dead); one that says
// DISCONNECT has left (workers_left). Either way each item it held is re-queued at the front, at
// most `max_requeues` times; after that the item is failed and handed to `on_failed`. After
// freeze() (a run's last counts) no worker is declared dead: a silent one stays, an unroutable or
// disconnecting one has left, and their items stay in flight. So at any moment:
//   received == queued + in_flight + pending_results + completed + failed.
//
// Threads: the broker's sockets are created by create() and then used by exactly one thread: the
// broker's own after start(), or the caller's through poll_once() when not started.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <zmq.hpp>

#include "bus/context.hpp"
#include "bus/socket.hpp"
#include "common/result.hpp"
#include "messages/envelope.hpp"

namespace kforge::bus {

/// A work item the broker gave up on.
struct failed_item {
  messages::envelope work;
  std::string reason;  ///< e.g. "lost by 2 workers (last: w1, silent for 150 ms)"
};

/// A worker that joined the pool (READY), for a log line.
struct worker_joined {
  std::string name;
  std::uint32_t credit = 0;
  std::chrono::milliseconds heartbeat_interval{0};
};

/// A worker that left the pool, and what became of the items it held.
struct worker_gone {
  std::string name;
  std::string reason;   ///< e.g. "silent for 1003 ms", "disconnected"
  bool died = false;    ///< counted in workers_dead (lost) rather than workers_left
  std::uint64_t taken = 0;     ///< items this session of the worker was given
  std::uint64_t returned = 0;  ///< of those, results it sent back
  std::uint64_t requeued = 0;  ///< items it held that went back in the queue
  std::uint64_t failed = 0;    ///< items it held that were failed (lost too often)
  std::uint64_t unjudged = 0;  ///< items it held that stay in flight (frozen: the run's last counts)
};

/// Broker configuration.
struct broker_options {
  attach_point frontend{"tcp://127.0.0.1:*", link::bind};  ///< PULL: work comes in here
  attach_point backend{"tcp://127.0.0.1:*", link::bind};   ///< ROUTER: workers connect here
  attach_point results{"", link::connect};                 ///< PUSH: results go out here
  /// How often the broker sends HEARTBEAT to each worker.
  std::chrono::milliseconds heartbeat_interval{1000};
  /// Missed intervals (the worker's own, from READY) before a worker is declared dead.
  int liveness = 5;
  /// How many times an item lost with a worker goes back in the queue before it is failed.
  int max_requeues = 1;
  /// Items waiting for a worker before the broker stops reading the frontend.
  std::size_t max_queued = 10000;
  /// High-water mark of each socket (per peer).
  int high_water_mark = 1000;
  /// Called on the broker's thread for each failed item; nothing else is done with it.
  std::function<void(const failed_item&)> on_failed;
  /// Called on the broker's thread for each valid work envelope read from the frontend (e.g. to
  /// record the link); must not block.
  std::function<void(const messages::envelope&)> on_received;
  /// Called on the broker's thread when a worker joins and when one is declared dead or leaves,
  /// so a host that fails or comes back is visible in the pool's log; must not block.
  std::function<void(const worker_joined&)> on_joined;
  std::function<void(const worker_gone&)> on_gone;
};

/// A snapshot of the broker's counters; safe to take from any thread (each field is exact, the
/// fields may be a poll iteration apart).
struct broker_counters {
  std::uint64_t received = 0;         ///< valid work envelopes read from the frontend
  std::uint64_t rejected = 0;         ///< frames that failed verification or the protocol
  std::uint64_t queued = 0;           ///< now waiting for a worker
  std::uint64_t in_flight = 0;        ///< now held by workers
  std::uint64_t pending_results = 0;  ///< now waiting for room in the result sink
  std::uint64_t dispatched = 0;       ///< WORK messages sent (a re-queued item counts again)
  std::uint64_t completed = 0;        ///< results handed to the sink
  std::uint64_t requeued = 0;         ///< items put back after their worker was lost
  std::uint64_t failed = 0;           ///< items given up on (see on_failed)
  std::uint64_t stale_results = 0;    ///< results from a worker that no longer held the item
  std::uint64_t workers_alive = 0;    ///< now
  std::uint64_t workers_dead = 0;     ///< declared dead (silent, unroutable), in total
  std::uint64_t workers_left = 0;     ///< said DISCONNECT, or gone while frozen, in total
};

class broker {
 public:
  /// Opens and binds/connects the three sockets. Errors name the endpoint and the reason.
  static result<broker> create(broker_options opts, zmq::context_t& ctx = shared_context());

  broker(broker&&) noexcept;
  broker& operator=(broker&&) noexcept;
  ~broker();  ///< stops the thread if running

  /// Runs the loop on a new thread until stop().
  status start();
  /// Stops and joins the thread (within about one heartbeat interval); idempotent.
  void stop();
  /// One loop iteration, waiting up to `timeout` for traffic: for tests and callers that drive
  /// the broker themselves. An error when started.
  status poll_once(std::chrono::milliseconds timeout);

  /// For a run's last counts: from the next loop iteration on, no work goes to workers and no
  /// result is taken from them, so what the broker holds stays counted as queued or in flight
  /// (left unjudged) and its completed count stops; new work is still read into the queue (past
  /// max_queued), so what a sampler sends at the end is counted as received. Thread-safe; stop()
  /// ends it as usual.
  void freeze();

  /// The counts as of the end of the loop's last iteration: consistent with each other.
  broker_counters counters() const;
  /// The counts once `received` has reached `n` (waiting at most `at_most`): for a run's last
  /// counts, so that work a sampler sent just before its last report reaches the count.
  broker_counters counters_once_received(std::uint64_t n, std::chrono::milliseconds at_most) const;
  /// Resolved endpoints (tcp://HOST:* shows the chosen port).
  const std::string& frontend_endpoint() const noexcept;
  const std::string& backend_endpoint() const noexcept;
  const std::string& results_endpoint() const noexcept;
  /// The last error the broker's own thread hit (empty: none); the loop keeps running after one.
  std::string last_error() const;

 private:
  struct impl;
  explicit broker(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace kforge::bus

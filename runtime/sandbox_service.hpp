#pragma once
// Serving sandbox work from the pool's broker: the loop a sandbox_worker thread runs, shared by
// the manifest's processes (process_runtime) and by `kforge worker --role sandbox --connect EP`,
// which joins a running pool from any host without a manifest entry.
#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <ostream>
#include <string>
#include <thread>

#include "actors/stage_core.hpp"
#include "common/first_error.hpp"
#include "actors/logic_interfaces.hpp"
#include "bus/worker.hpp"
#include "messages/recording.hpp"

namespace kforge::pipeline {

/// A sandbox worker thread's counters, read by a metrics reader under the mutex.
struct worker_slot {
  std::string name;
  std::optional<messages::recording_writer> recording;  ///< the worker thread's own
  first_error* write_failures = nullptr;  ///< where a failed write of `recording` goes
  std::mutex mu;
  actors::stage_core core;
  std::uint64_t held = 0;
  std::thread thread;
};

/// Connects to the pool's broker at `endpoint` and takes work items until `stop`, up to
/// options.capacity at once: each candidate through `logic` (on a helper thread, heartbeating
/// meanwhile: a real verdict takes seconds), its verdict sent back as it is ready; on stop, those
/// in flight are finished and sent, then it leaves. `logic` must be thread-safe. A malformed item or a failing
/// logic becomes an infra_error verdict, a failed connection an error in the slot's counters;
/// nothing is dropped silently.
void serve_sandbox_worker(const std::string& endpoint, const bus::worker_options& options,
                          const std::shared_ptr<actors::sandbox_logic>& logic, worker_slot& slot,
                          const std::atomic<bool>& stop);

struct sandbox_worker_options {
  std::string connect;   ///< the pool's worker endpoint, e.g. tcp://head:5557
  std::string manifest;  ///< sandbox settings from here; empty: the embedded default's
  int threads = 4;       ///< worker threads (candidates in flight)
  std::string name;      ///< worker name prefix; empty: host name + pid
};

/// `kforge worker --role sandbox --connect EP`: runs the real sandbox (backend "nvcc") for a pool
/// until SIGINT/SIGTERM, then leaves the broker (its held items are re-queued).
int sandbox_worker_command(const sandbox_worker_options& opt, std::ostream& out, std::ostream& err);

}  // namespace kforge::pipeline

#pragma once
// One process of a topology: the stage actors the manifest puts in it, the bus sockets joining them
// to the other processes, and a pump thread that moves envelopes from sockets into actors, records
// the links the manifest asks for, and reports every local stage's metrics to the head.
//
// Every link goes over the bus, also between stages of one process (inproc://), so a topology
// behaves the same whether it runs in one process or ten. Who binds: the end that is a singleton
// or central (task_generator for tasks, the pool for candidates and sandbox_workers, reward for
// verdicts, buffer for scored and batches, trainer for weights, the head for control and metrics);
// the other ends connect.

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "common/bind_address.hpp"
#include "common/result.hpp"
#include "config/manifest.hpp"

namespace kforge::pipeline {

/// Where a resumed run (kforge run --resume) goes on from: a trainer checkpoint of step `step`.
struct resume_point {
  /// The checkpoint's step, which is also its policy version (one version per batch).
  std::uint64_t step = 0;
  /// The checkpoint directory, RUN_DIR/checkpoints/step-N (trainer/checkpoint.hpp's layout).
  std::string checkpoint;
};

struct runtime_options {
  /// The run directory: recordings/, bus/ (ipc sockets) and logs live under it.
  std::string run_dir;
  /// How often the pump sends this process's stage metrics to the head.
  std::chrono::milliseconds metrics_interval{250};
  /// A non-head process stops when it has heard nothing on the control link for this long (the
  /// head publishes a heartbeat every few hundred ms), so a dead head leaves no orphans.
  std::chrono::milliseconds orphan_timeout{15000};
  /// How long an outlet waits for room before it counts a send as failed.
  std::chrono::milliseconds send_timeout{30000};
  /// Heartbeat interval between the sandbox pool (broker) and its workers; a worker is declared
  /// dead after `liveness` missed intervals and its work is re-queued.
  std::chrono::milliseconds heartbeat_interval{250};
  int liveness = 4;
  /// Set: this process continues a run. Its trainers load the checkpoint; its samplers start from
  /// the checkpoint's weights and its buffer from its version, as if the trainer had just published
  /// them; its step driver releases steps from `step` on. Unset: a fresh run from step 0.
  std::optional<resume_point> resume;
};

class process_runtime {
 public:
  /// Builds the process named `process` of `m`: sockets, actors, broker, workers. Nothing runs on
  /// the pump until run(). Errors name the link or stage that could not be set up.
  static result<std::unique_ptr<process_runtime>> create(const manifest& m,
                                                         const std::string& process,
                                                         const runtime_options& o);
  ~process_runtime();

  /// Runs the pump on the calling thread until a shutdown arrives on the control link, stop() is
  /// called, or (not the head) the head falls silent. Then stops every local stage.
  status run();
  /// Asks run() to return; safe from any thread or a signal handler.
  void stop() noexcept;

 private:
  struct impl;
  explicit process_runtime(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

/// The address a binding socket uses for `endpoint` (common/bind_address.hpp).
using ::kforge::bind_address;

/// Creates the directory an ipc:// endpoint's socket file lives in; no-op for other schemes.
status prepare_endpoint(const std::string& endpoint);

/// The recording file of `link` received by `process`: RUN_DIR/recordings/LINK@PROCESS.kfrec.
std::string recording_path(const std::string& run_dir, link l, const std::string& process);

}  // namespace kforge::pipeline

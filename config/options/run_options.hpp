#pragma once
// Settings of one run as a whole, from the manifest's [run] table. Read by the head (`kforge run`).

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>

namespace kforge {

/// How rollout and training take turns.
enum class run_mode {
  sync,   ///< generate a batch, then train on it; rollout waits for the new weights
  async,  ///< rollout keeps generating with the newest weights it has while the trainer trains
};

struct run_options {
  /// Name of the run; also the default run directory's last component. [A-Za-z0-9_.-]+.
  std::string name = "default";
  /// sync or async (see run_mode).
  run_mode mode = run_mode::async;
  /// Training steps (optimizer updates) before the run stops. >= 1.
  std::int64_t steps = 1000;
  /// Seed for task sampling, generation and input initialisation. >= 0.
  std::int64_t seed = 0;
  /// Directory for metrics, recordings, checkpoints and ipc sockets. Default "runs/<name>".
  std::string run_dir = "runs/default";
  /// Draw the live progress line on the terminal.
  bool progress = true;
  /// The run stops as stalled when no message moves for this long. One generate call of a slow
  /// sampler (a big batch of long completions, or the CPU) sends nothing until it ends. > 0.
  double stall_timeout_s = 20.0;
  /// Seconds of wall time after which the run stops as if its steps were done (drain, final
  /// checkpoint, summary; exit 0) even when fewer steps ran: a run bounded by a time budget (a
  /// device call, a demonstration). 0: no limit. >= 0.
  double time_limit_s = 0.0;
  /// > 0: the head serves the live metrics at http://<any address of its host>:PORT/metrics in
  /// Prometheus's text format, for a cluster's scraper. 0: off. In [0, 65535].
  int metrics_port = 0;
};

/// How long a process waits at the stop for its stages' last counts. A stage inside a logic call
/// answers when the call ends: a sampler of episodes is rarely idle at the stop (its next turns
/// keep it busy), and counts taken from its report before that call miss what the call sent. As
/// long as a call may send nothing (stall_timeout_s), at least 2 s and at most a minute.
inline std::chrono::milliseconds final_counts_wait(const run_options& r) {
  const double s = std::clamp(r.stall_timeout_s, 2.0, 60.0);
  return std::chrono::milliseconds(static_cast<std::int64_t>(s * 1000));
}

}  // namespace kforge

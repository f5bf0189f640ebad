#pragma once
// Per-stage counters and the latency of logic calls. Plain C++: the actors keep one of these in
// their state and reply with a stage_metrics snapshot; the pipeline writes those to metrics.jsonl.

#include <array>
#include <cstdint>
#include <map>
#include <string>

#include "messages/envelope.hpp"

namespace kforge::actors {

/// The extra counter every stage reports: microseconds spent inside logic calls since it started
/// (stage_core::record_call). Cumulative; busy_us / elapsed is how busy the stage kept its thread.
inline constexpr const char* busy_counter = "busy_us";
/// A gauge, 1 while a stage instance is still building its logic (a sandbox worker starting its
/// GPU's reference servers and runners, on a thread of its own while its process already runs):
/// the head's stall clock waits for it (metrics_board::starting).
inline constexpr const char* starting_gauge = "starting";
/// The extra counter of errors a stage cannot go on from: a result it failed to write (the
/// trainer's log, weights or checkpoint). The head ends the run on the first it sees, with the
/// stage's last_error, which then holds that error's message.
inline constexpr const char* fatal_counter = "fatal_errors";

/// A snapshot of one stage actor's counters. What counts as an input or output is per stage and
/// documented on each stage's header; in every stage an input ends up sent on, dropped, failed
/// (errors), or still waiting (queue_depth), so those always add up.
struct stage_metrics {
  std::string stage;               ///< the stage kind: "sampler", "reward", ...
  std::string name;                ///< the instance, also its envelopes' sender: "sampler/0"
  std::uint64_t received = 0;      ///< work inputs accepted (including ones that then failed)
  std::uint64_t sent = 0;          ///< output envelopes sent downstream
  std::uint64_t dropped = 0;       ///< inputs deliberately not passed on (stale, duplicate, ...)
  std::uint64_t errors = 0;        ///< inputs refused or whose logic call failed
  std::uint64_t queue_depth = 0;   ///< messages waiting: mailbox, held while paused, logic backlog
  std::uint64_t logic_calls = 0;   ///< calls into the stage logic (latency samples)
  double latency_p50_us = 0;       ///< median logic call time, microseconds (bucketed, +-10%)
  double latency_p99_us = 0;       ///< 99th percentile logic call time, microseconds
  std::string last_error;          ///< the most recent error's message, empty if none
  /// Stage-specific counters beside the common ones (e.g. the reward's "feedback_sent"); the wire
  /// form carries them as StageMetrics.extra, which the head's balance checks read.
  std::map<std::string, std::uint64_t> extra;
};

/// The snapshot as the wire's StageMetrics (stage = the instance name, kind = the stage kind;
/// the process is left for the caller to fill in).
wire::StageMetricsT to_wire(const stage_metrics& m);

/// A log-bucketed histogram of durations: four buckets per power of two from 1 ns to ~18 min, so a
/// percentile is known within about 10% in constant memory, whatever the number of samples.
class latency_histogram {
 public:
  void record(std::int64_t nanoseconds) noexcept;
  std::uint64_t count() const noexcept { return count_; }
  /// The q-quantile (0 < q <= 1) in microseconds: the geometric middle of its bucket; 0 if empty.
  double quantile_us(double q) const noexcept;

 private:
  static constexpr int buckets_per_octave = 4;
  static constexpr int octaves = 40;
  std::array<std::uint64_t, buckets_per_octave * octaves + 1> buckets_{};
  std::uint64_t count_ = 0;
};

}  // namespace kforge::actors

#pragma once
// What the head makes of the stage metrics every process reports: the latest row per stage
// instance, the counts-in = counts-out checks along the pipeline, and the live progress line.
// Plain data over wire::StageMetricsT, so the run command stays a sequence of steps.

#include <chrono>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "messages/envelope.hpp"

namespace kforge::pipeline {

/// One metrics row as metrics.jsonl and summary.json write it.
nlohmann::json to_json(const wire::StageMetricsT& m);

/// The latest metrics of every stage instance, keyed by instance name (unique in a topology).
struct metrics_board {
  std::map<std::string, wire::StageMetricsT> latest;
  /// Processes that have exited: their last report stays (its counts happened) but what it says
  /// was queued there is gone with them, so it no longer holds up draining.
  std::set<std::string> gone;

  /// `field` summed over the instances of stage kind `kind`.
  std::uint64_t sum(const std::string& kind, std::uint64_t wire::StageMetricsT::*field) const;
  /// The extra counter `name` summed over the instances of `kind`.
  std::uint64_t extra(const std::string& kind, const std::string& name) const;
  /// Work that moves through the stages; unchanged across an interval means nothing happened.
  /// The bus rows are left out: they count control heartbeats, which never stop.
  std::uint64_t activity() const;
  /// Messages waiting in live processes (the buffer's held samples only if `count_buffer`).
  std::uint64_t queued(bool count_buffer) const;
};

/// A check that counts along the pipeline balance, for summary.json and the final table.
struct balance_check {
  std::string what;
  std::uint64_t left, right;
  bool ok() const { return left == right; }
};

/// The checks, link by link: samplers -> pool -> reward -> buffer -> trainer, and the feedback
/// link reward -> task generator (the stages' extra counters "feedback_sent" and "feedback").
std::vector<balance_check> balance(const metrics_board& b);

/// The live progress line: redrawn in place on a terminal, one line every 5 s otherwise.
class progress_line {
 public:
  explicit progress_line(bool enabled);
  void draw(std::ostream& err, const std::string& text, bool force = false);
  void end(std::ostream& err);

 private:
  bool enabled_, tty_;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace kforge::pipeline

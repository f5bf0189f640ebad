#pragma once
// Plain statistics over timed trials, and the cross-check of event time against host wall time
// that catches work hidden on another stream.
#include <string>
#include <vector>

namespace kforge::sandbox {

struct trial_stats {
  double median_ms = 0;
  double p25_ms = 0;
  double p75_ms = 0;
  int trials = 0;
  double iqr_ms() const { return p75_ms - p25_ms; }
};

/// Median and quartiles (linear interpolation); all zero for no samples.
trial_stats summarize_trials(std::vector<double> ms);

/// Event time only covers work on the stream the sandbox passed; the wall time around a
/// device-wide synchronize covers all of it. When the median per-trial gap (wall - event) exceeds
/// `slack_ms` + `slack_fraction` x the median event time, work ran somewhere the events did not
/// see. Returns an empty string when consistent, else the reason.
std::string hidden_work(const std::vector<double>& event_ms, const std::vector<double>& wall_ms,
                        double slack_ms = 0.10, double slack_fraction = 0.5);

}  // namespace kforge::sandbox

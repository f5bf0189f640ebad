#include "sandbox/timing_stats.hpp"

#include <algorithm>
#include <cstdio>

namespace kforge::sandbox {

namespace {
double quantile(const std::vector<double>& sorted, double q) {
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<std::size_t>(pos);
  const auto hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - static_cast<double>(lo));
}
}  // namespace

trial_stats summarize_trials(std::vector<double> ms) {
  trial_stats s;
  if (ms.empty()) return s;
  std::sort(ms.begin(), ms.end());
  s.median_ms = quantile(ms, 0.5);
  s.p25_ms = quantile(ms, 0.25);
  s.p75_ms = quantile(ms, 0.75);
  s.trials = static_cast<int>(ms.size());
  return s;
}

std::string hidden_work(const std::vector<double>& event_ms, const std::vector<double>& wall_ms,
                        double slack_ms, double slack_fraction) {
  if (event_ms.empty() || event_ms.size() != wall_ms.size()) return {};
  std::vector<double> gap(event_ms.size());
  for (std::size_t i = 0; i < gap.size(); ++i) gap[i] = wall_ms[i] - event_ms[i];
  const double g = summarize_trials(gap).median_ms;
  const double e = summarize_trials(event_ms).median_ms;
  if (g <= slack_ms + slack_fraction * e) return {};
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "work outside the given stream: wall time around a device synchronize exceeds "
                "the stream's event time by %.3f ms (median event time %.3f ms)",
                g, e);
  return buf;
}

}  // namespace kforge::sandbox

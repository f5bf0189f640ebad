#pragma once
// The run's live metrics in Prometheus's text exposition format (version 0.0.4), for a cluster's
// scraper: every stage instance's counts (received, sent, dropped, errors) as counters, its queue
// depth and latency as gauges, its extra counters (verdicts by status, busy time, ...) labelled by
// name, and the run's own gauges: policy version, steps, elapsed time, pass rate and mean reward
// of the verdicts so far, and each GPU group's busy fraction. Plain text from the head's metrics
// board; runtime/metrics_endpoint.hpp serves it.

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/run_metrics.hpp"

namespace kforge::pipeline {

struct run_gauges {
  std::uint64_t policy_version = 0;
  std::int64_t steps = 0;
  double elapsed_s = 0;
  std::vector<gpu_group_use> gpu_groups;
};

std::string prometheus_text(const metrics_board& b, const run_gauges& g);

}  // namespace kforge::pipeline

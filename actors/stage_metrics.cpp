#include "actors/stage_metrics.hpp"

#include <algorithm>
#include <cmath>
#include <memory>

namespace kforge::actors {

wire::StageMetricsT to_wire(const stage_metrics& m) {
  wire::StageMetricsT w;
  w.stage = m.name;
  w.received = m.received;
  w.sent = m.sent;
  w.dropped = m.dropped;
  w.errors = m.errors;
  w.queue_depth = m.queue_depth;
  w.latency_p50_us = m.latency_p50_us;
  w.latency_p99_us = m.latency_p99_us;
  w.kind = m.stage;
  w.logic_calls = m.logic_calls;
  w.last_error = m.last_error;
  for (const auto& [name, value] : m.extra) {
    auto c = std::make_unique<wire::CounterT>();
    c->name = name;
    c->value = value;
    w.extra.push_back(std::move(c));
  }
  return w;
}

void latency_histogram::record(std::int64_t ns) noexcept {
  // Bucket 0 holds durations under 1 ns; bucket i >= 1 holds [2^((i-1)/4), 2^(i/4)) ns.
  std::size_t i = 0;
  if (ns >= 1) {
    const double b = std::floor(std::log2(static_cast<double>(ns)) * buckets_per_octave) + 1;
    i = static_cast<std::size_t>(std::clamp(b, 1.0, static_cast<double>(buckets_.size() - 1)));
  }
  ++buckets_[i];
  ++count_;
}

double latency_histogram::quantile_us(double q) const noexcept {
  if (count_ == 0) return 0;
  const auto rank = static_cast<std::uint64_t>(
      std::ceil(std::clamp(q, 0.0, 1.0) * static_cast<double>(count_)));
  std::uint64_t seen = 0;
  for (std::size_t i = 0; i < buckets_.size(); ++i) {
    seen += buckets_[i];
    if (seen >= std::max<std::uint64_t>(rank, 1)) {
      if (i == 0) return 0;
      const double mid_ns = std::exp2((static_cast<double>(i) - 0.5) / buckets_per_octave);
      return mid_ns / 1000.0;
    }
  }
  return 0;
}

}  // namespace kforge::actors

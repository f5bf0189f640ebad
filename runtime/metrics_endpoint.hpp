#pragma once
// The head's HTTP endpoint for a cluster's metrics scraper ([run] metrics_port): GET /metrics
// answers the latest text the run published (runtime/prometheus_text.hpp), as Prometheus's text
// format. The server runs on a thread of its own; publishing a new text is a swap under a lock, so
// the run's monitor loop never waits for a scrape.

#include <cstdint>
#include <memory>
#include <string>

#include "common/result.hpp"

namespace kforge::pipeline {

class metrics_endpoint {
 public:
  /// Listens on `host`:`port` (port 0: a free one) and serves in the background. An error names
  /// the address when it cannot be bound.
  static result<std::unique_ptr<metrics_endpoint>> start(const std::string& host, int port);
  ~metrics_endpoint();
  metrics_endpoint(const metrics_endpoint&) = delete;
  metrics_endpoint& operator=(const metrics_endpoint&) = delete;

  /// The port it listens on.
  int port() const noexcept;
  /// What GET /metrics answers from now on.
  void publish(std::string text);

 private:
  struct impl;
  explicit metrics_endpoint(std::unique_ptr<impl> i);
  std::unique_ptr<impl> impl_;
};

}  // namespace kforge::pipeline

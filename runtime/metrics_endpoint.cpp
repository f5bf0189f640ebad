#include "runtime/metrics_endpoint.hpp"

#include <httplib.h>

#include <chrono>
#include <mutex>
#include <thread>
#include <utility>

namespace kforge::pipeline {

struct metrics_endpoint::impl {
  httplib::Server server;
  std::thread thread;
  int port = 0;
  std::mutex mutex;
  std::string text;
};

metrics_endpoint::metrics_endpoint(std::unique_ptr<impl> i) : impl_(std::move(i)) {}

result<std::unique_ptr<metrics_endpoint>> metrics_endpoint::start(const std::string& host, int port) {
  auto i = std::make_unique<impl>();
  auto* state = i.get();
  i->server.Get("/metrics", [state](const httplib::Request&, httplib::Response& res) {
    std::string text;
    {
      std::lock_guard<std::mutex> g(state->mutex);
      text = state->text;
    }
    res.set_content(text, "text/plain; version=0.0.4; charset=utf-8");
  });
  const int bound = port == 0 ? i->server.bind_to_any_port(host) : (i->server.bind_to_port(host, port) ? port : -1);
  if (bound <= 0)
    return error{"run.metrics_port: cannot listen on " + host + ":" + std::to_string(port) +
                 " (in use, or not an address of this host)"};
  i->port = bound;
  i->thread = std::thread([state] { state->server.listen_after_bind(); });
  // stop() does nothing before the listen loop runs: a stop that came first would leave the
  // destructor waiting for a loop that never ends.
  for (int k = 0; k < 2000 && !i->server.is_running(); ++k) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return std::unique_ptr<metrics_endpoint>(new metrics_endpoint(std::move(i)));
}

metrics_endpoint::~metrics_endpoint() {
  impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

int metrics_endpoint::port() const noexcept { return impl_->port; }

void metrics_endpoint::publish(std::string text) {
  std::lock_guard<std::mutex> g(impl_->mutex);
  impl_->text = std::move(text);
}

}  // namespace kforge::pipeline

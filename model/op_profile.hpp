// op_profile: where a LibTorch program's host time goes, op by op, without Kineto or perf (the GPU
// host has neither perf nor gdb). A thread-local RecordFunction callback times every ATen op the
// calling thread dispatches; each op's self time is its time minus that of the ops it called. With
// CUDA tensors the times are host times (launch and dispatch), which is what a host-bound decoding
// loop spends.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <ATen/record_function.h>
#include <nlohmann/json.hpp>

namespace kforge::model {

class op_profile {
 public:
  struct op_stats {
    std::int64_t calls = 0;
    double total_us = 0, self_us = 0;
  };

  // Records the calling thread's ops from construction to stop().
  op_profile() {
    active_ = this;
    handle_ = at::addThreadLocalCallback(at::RecordFunctionCallback(&on_start, &on_end));
    t0_ = clock::now();
  }
  ~op_profile() { stop(); }
  op_profile(const op_profile&) = delete;
  op_profile& operator=(const op_profile&) = delete;

  void stop() {
    if (active_ != this) return;
    at::removeCallback(handle_);
    active_ = nullptr;
    wall_us_ = std::chrono::duration<double, std::micro>(clock::now() - t0_).count();
  }

  // The `top` ops by self time, printed and as JSON (every op in the JSON).
  nlohmann::json report(std::size_t top) const {
    std::vector<std::pair<std::string, op_stats>> rows(ops_.begin(), ops_.end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.self_us > b.second.self_us; });
    double self_sum = 0;
    std::int64_t calls = 0;
    for (const auto& r : rows) self_sum += r.second.self_us, calls += r.second.calls;
    std::printf("op profile: %.1f ms wall, %.1f ms inside ops (%lld calls); top %zu by self host time:\n",
                wall_us_ / 1e3, self_sum / 1e3, static_cast<long long>(calls), std::min(top, rows.size()));
    std::printf("  %-44s %9s %11s %11s %9s\n", "op", "calls", "self ms", "total ms", "us/call");
    nlohmann::json ops = nlohmann::json::array();
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const auto& [name, s] = rows[i];
      if (i < top)
        std::printf("  %-44s %9lld %11.2f %11.2f %9.1f\n", name.c_str(), static_cast<long long>(s.calls), s.self_us / 1e3,
                    s.total_us / 1e3, s.self_us / static_cast<double>(s.calls));
      ops.push_back({{"op", name}, {"calls", s.calls}, {"self_us", s.self_us}, {"total_us", s.total_us}});
    }
    return {{"wall_us", wall_us_}, {"self_us_in_ops", self_sum}, {"calls", calls}, {"ops", ops}};
  }

 private:
  using clock = std::chrono::steady_clock;
  struct frame {
    std::string name;
    clock::time_point start;
    double child_us = 0;
  };

  static std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
    if (active_ != nullptr) active_->stack_.push_back({fn.name(), clock::now(), 0});
    return nullptr;
  }
  static void on_end(const at::RecordFunction&, at::ObserverContext*) {
    op_profile* p = active_;
    if (p == nullptr || p->stack_.empty()) return;
    frame f = std::move(p->stack_.back());
    p->stack_.pop_back();
    const double us = std::chrono::duration<double, std::micro>(clock::now() - f.start).count();
    op_stats& s = p->ops_[f.name];
    ++s.calls;
    s.total_us += us;
    s.self_us += us - f.child_us;
    if (!p->stack_.empty()) p->stack_.back().child_us += us;
  }

  static inline thread_local op_profile* active_ = nullptr;
  at::CallbackHandle handle_{};
  clock::time_point t0_;
  double wall_us_ = 0;
  std::vector<frame> stack_;
  std::map<std::string, op_stats> ops_;
};

}  // namespace kforge::model

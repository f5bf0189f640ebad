#include "sandbox/memory_gate.hpp"

namespace kforge::sandbox {

void memory_gate::set_budget(std::int64_t bytes) {
  {
    std::lock_guard lock(mutex_);
    budget_ = bytes > 0 ? bytes : 0;
  }
  freed_.notify_all();
}

std::int64_t memory_gate::claimed() const {
  std::lock_guard lock(mutex_);
  return claimed_;
}

memory_gate::claim::claim(memory_gate& g, std::int64_t bytes) : gate_(g) {
  std::unique_lock lock(g.mutex_);
  if (g.budget_ == 0 || bytes <= 0) return;
  g.freed_.wait(lock, [&] { return g.budget_ == 0 || g.claimed_ == 0 || g.claimed_ + bytes <= g.budget_; });
  bytes_ = bytes;
  g.claimed_ += bytes;
}

memory_gate::claim::~claim() {
  if (bytes_ == 0) return;
  {
    std::lock_guard lock(gate_.mutex_);
    gate_.claimed_ -= bytes_;
  }
  gate_.freed_.notify_all();
}

}  // namespace kforge::sandbox

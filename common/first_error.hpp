#pragma once
// The first error any of several threads met, kept for the one thread that acts on it: a process's
// pump ends the process with the first failed write of a recording, whichever thread wrote it.
#include <mutex>

#include "common/result.hpp"

namespace kforge {

class first_error {
 public:
  /// Keeps `s` if it is an error and none was kept before.
  void note(const status& s) {
    if (s) return;
    std::lock_guard<std::mutex> g(mu_);
    if (first_) first_ = s;
  }
  /// The error kept, or success.
  status get() const {
    std::lock_guard<std::mutex> g(mu_);
    return first_;
  }

 private:
  mutable std::mutex mu_;
  status first_;
};

}  // namespace kforge

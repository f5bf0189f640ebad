#pragma once
// A full disk, as tests (root or not) can make one: while a file_size_limit lives, this process may
// not write a file past `bytes` (RLIMIT_FSIZE), and a write that would fails with EFBIG instead of
// raising SIGXFSZ, which is ignored meanwhile. Both are restored after. Permission bits cannot
// stand in for a read-only disk in a test run as root; this works for root too.
#include <signal.h>
#include <sys/resource.h>

#include <cstdint>

namespace kforge::testing {

class file_size_limit {
 public:
  explicit file_size_limit(std::uint64_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &saved_);
    rlimit lower = saved_;
    lower.rlim_cur = static_cast<rlim_t>(bytes);  // the soft limit: raised again below
    ::setrlimit(RLIMIT_FSIZE, &lower);
    saved_handler_ = ::signal(SIGXFSZ, SIG_IGN);
  }
  ~file_size_limit() {
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    ::signal(SIGXFSZ, saved_handler_);
  }
  file_size_limit(const file_size_limit&) = delete;
  file_size_limit& operator=(const file_size_limit&) = delete;

 private:
  rlimit saved_{};
  sighandler_t saved_handler_ = SIG_DFL;
};

}  // namespace kforge::testing

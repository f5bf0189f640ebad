#pragma once
// Running independent items on a few threads: each thread takes the next index until none is
// left. Results go into slots the caller owns (one per index), so no ordering is needed.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <thread>
#include <vector>

namespace kforge {

/// Calls fn(i) for every i in [0, n) on `threads` threads (at least one); returns when all are done.
template <class Fn>
void parallel_for(std::size_t n, int threads, Fn&& fn) {
  std::atomic<std::size_t> next{0};
  std::vector<std::thread> pool;
  const int count = std::max(1, threads);
  for (int t = 0; t < count; ++t)
    pool.emplace_back([&] {
      for (std::size_t i; (i = next++) < n;) fn(i);
    });
  for (auto& t : pool) t.join();
}

}  // namespace kforge

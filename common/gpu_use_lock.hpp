#pragma once
// Use of one physical GPU shared by the processes of a host, by flock on files named after it, so
// that a sandbox's timed trial runs alone on its GPU: GPU contexts time-slice, and another
// process's kernels stretch both the events and the wall time of a trial (measured 2026-12-02: with
// the sampler generating on the same GPU, 22 % of the loop's verdicts were false hack_suspected).
//
// Any number of shared users at once (a sandbox's verification, the sampler's decode steps), or
// one exclusive user (a timed trial). An exclusive user first takes the gate, so that no new
// shared user enters while it waits for the current ones to leave: timing is never starved by a
// stream of short shared uses. Without the lock files (an unwritable /tmp) the lock is a no-op
// rather than an error: it guards honest timing, not correctness.

#include <string>

namespace kforge {

class gpu_use_lock {
 public:
  /// Blocks until the use is granted. `gpu` is the physical GPU (physical_gpu(ordinal)).
  gpu_use_lock(const std::string& gpu, bool exclusive);
  ~gpu_use_lock();
  gpu_use_lock(const gpu_use_lock&) = delete;
  gpu_use_lock& operator=(const gpu_use_lock&) = delete;

  /// The lock file for `gpu` (its gate is the same path with ".gate" appended).
  static std::string path(const std::string& gpu);

 private:
  int fd_ = -1;
};

}  // namespace kforge

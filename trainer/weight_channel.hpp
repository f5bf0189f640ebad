#pragma once
// The NCCL channel that carries new policy weights from the trainer (rank 0) to the samplers on
// other GPUs (ranks 1..n): one broadcast of one flat device buffer per version (weight_broadcast.hpp
// lays the model's parameters out in it). Built only where CUDA is (KFORGE_WITH_CUDA); tested by
// tests/trainer/weight_broadcast_gpu_test.cpp on a host with 2 GPUs.
//
// A broadcast only ends when every rank has joined it, and a sampler joins between generation
// batches, so transfer() runs on the channel's own CUDA stream (never the compute stream: the
// trainer goes on training while rank 0's send waits) and blocks only its calling thread, at most
// `timeout`. A rank that never joins (a dead or stuck process) makes the others' transfer fail after
// the timeout; the channel then aborts its communicator (which also ends the NCCL kernels still
// waiting) and stays broken: every later transfer fails at once and the caller falls back to files.
//
// This header is torch-free and CUDA-free.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>

#include "common/result.hpp"
#include "trainer/nccl_id.hpp"

namespace kforge::trainer {

struct weight_channel_options {
  nccl_id id;         ///< the group's unique id, made by rank 0 (new_nccl_id)
  int rank = 0;       ///< 0: the trainer, which sends; 1..size-1: samplers, which receive
  int size = 2;       ///< the trainer and every sampler
  int device = 0;     ///< CUDA ordinal of this rank's buffers
  /// For joining, and then for each transfer (so the first transfer may take up to twice this).
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};
};

class weight_channel {
 public:
  /// Nothing is joined yet: the communicator is made by the first transfer (ncclCommInitRank
  /// blocks until every rank calls it, and the samplers learn the id from the first message).
  explicit weight_channel(weight_channel_options o);
  ~weight_channel();
  weight_channel(const weight_channel&) = delete;
  weight_channel& operator=(const weight_channel&) = delete;

  /// Broadcasts `bytes` bytes at `data` (device memory on the channel's device) from rank 0 into
  /// the same-sized buffer of every other rank. The caller's writes to `data` must be complete
  /// (synchronised) before, and it must not touch `data` until this returns. Blocks until done.
  status transfer(void* data, std::size_t bytes);

  /// Makes a transfer waiting in another thread fail at its next poll (within a millisecond), so
  /// that a shutdown does not wait out the timeout for a peer that has gone.
  void request_abort() noexcept { abort_ = true; }

  /// After a failure or timeout: every transfer fails.
  bool broken() const noexcept { return broken_; }
  const weight_channel_options& options() const noexcept { return o_; }

 private:
  status join();
  status fail(const std::string& why);
  /// For waits: true once request_abort was called.
  std::function<bool()> stopping() const {
    return [this] { return abort_.load(); };
  }

  weight_channel_options o_;
  struct state;
  std::unique_ptr<state> s_;
  std::atomic<bool> broken_{false};
  std::atomic<bool> abort_{false};
};

}  // namespace kforge::trainer

#pragma once
// The data-parallel gradient sum overlapped with the backward pass. Without it, a step
// runs the whole backward pass and then sums every gradient (all_reduce_gradients); with it, the
// gradients are packed into buckets (in reverse parameter order, roughly the order backward
// produces them) and each bucket's sum starts as soon as its last gradient is known, while the
// backward pass goes on with earlier layers. The sums run on the group's own stream
// (collective::all_reduce_sum_start): only groups that sum in the background use this
// (collective::sums_in_background: NCCL ranks in processes of their own).
//
// How: a hook on every parameter the backward pass runs on (the bf16 compute copies, or the fp32
// parameters themselves) sees the gradient of the last micro-batch before it is accumulated, and
// writes the accumulated master gradient (what the step would have after accumulating: master
// gradient + this gradient, in fp32) into its bucket. finish() starts the buckets no hook
// completed (parameters without a gradient take part as their gradient so far, or zeros), waits,
// and writes the sums into the master gradients. Every rank starts the buckets in the same order,
// whatever its share held and whatever failed, so the ranks' calls always match.
//
// Memory: the buckets are one fp32 copy of all gradients, kept for the reducer's life (4 bytes a
// parameter; all_reduce_gradients needs one bucket at a time). Making the master gradients views
// into the buckets (as PyTorch DDP can) would save it; not done.
//
// Not thread-safe across steps; hooks may run on autograd's device threads (one per device).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include "common/result.hpp"
#include "trainer/collective.hpp"

namespace kforge::trainer {

class gradient_reducer {
 public:
  /// `masters`: the parameters the optimiser steps (their gradients are summed); `backward`: the
  /// tensors the backward pass produces gradients for, one per master (the masters themselves, or
  /// their lower-precision compute copies). Hooks are registered on `backward` until destruction.
  gradient_reducer(std::vector<at::Tensor> masters, std::vector<at::Tensor> backward, collective& group,
                   std::size_t bucket_bytes = 25u << 20);
  ~gradient_reducer();
  gradient_reducer(const gradient_reducer&) = delete;
  gradient_reducer& operator=(const gradient_reducer&) = delete;

  /// The next backward pass is this rank's last of the step: its hooks fill and start buckets.
  void arm();
  /// After this rank's backward passes (and their accumulation into the masters), or after its
  /// share failed: starts the buckets not started yet, waits for every sum and writes the sums
  /// into the masters' gradients. The first error of a sum, if any. Disarms.
  status finish();

  /// Buckets the last finished step started during its backward pass (the rest in finish()).
  std::size_t started_early() const noexcept { return last_started_early_; }

 private:
  struct bucket {
    std::vector<std::size_t> members;  ///< indices into masters_, in bucket order
    std::int64_t elements = 0;
    at::Tensor flat;                   ///< the members' gradients, flattened
    std::size_t filled = 0;            ///< members written this step
  };
  void on_gradient(std::size_t param, const at::Tensor& grad);
  void start_complete();  ///< starts, in order, the complete buckets after the last started one
  at::Tensor slot(std::size_t param);  ///< the parameter's part of its bucket
  /// Writes a gradient that will not change any more (or zeros, where there is none) into its slot.
  void write_final(std::size_t param);

  std::vector<at::Tensor> masters_, backward_;
  collective& group_;
  std::vector<bucket> buckets_;
  std::vector<std::size_t> bucket_of_, offset_of_;
  std::vector<bool> written_, hooked_;
  std::vector<std::pair<std::size_t, unsigned>> hooks_;  ///< (parameter, hook handle)
  std::size_t next_to_start_ = 0, started_early_ = 0, last_started_early_ = 0;
  bool armed_ = false;
  std::string first_error_;
  std::mutex mutex_;
};

}  // namespace kforge::trainer

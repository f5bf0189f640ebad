#pragma once
// Collective operations across the ranks of a data-parallel trainer group: the gradient all-reduce
// of every step and the weight broadcast, and for sharded optimiser state (sharded_adamw.hpp) the
// gradient reduce-scatter and the weight all-gather. Kinds of group:
//   - make_thread_group: the ranks are threads of one process, tensors on any device. Sums run in
//     rank order, so every rank gets bit-identical results and a run is deterministic. This is what
//     CPU tests and CPU-only hosts use.
//   - make_nccl_group (trainer/nccl_group.hpp, CUDA builds): one rank per GPU over NCCL, in one
//     process or many; the unique id travels over the bus.
//   - make_socket_group (trainer/socket_group.hpp): CPU ranks in processes of their own, summing
//     in the thread group's rank order.
// Every rank must make the same calls in the same order with the same shapes and dtypes; a
// mismatch is an error on every rank (thread group) rather than a hang where it can be detected.
//
// Includes ATen's Tensor only.

#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "common/result.hpp"

namespace kforge::trainer {

class collective {
 public:
  virtual ~collective() = default;
  virtual int rank() const noexcept = 0;
  virtual int size() const noexcept = 0;
  /// Sums each tensor in place across the ranks.
  [[nodiscard]] virtual status all_reduce_sum(const std::vector<at::Tensor>& tensors) = 0;
  /// Copies `root`'s tensors into every other rank's.
  [[nodiscard]] virtual status broadcast(const std::vector<at::Tensor>& tensors, int root) = 0;
  /// Sums `input` across the ranks and leaves chunk rank() of the sum in `output`: `input` is
  /// size() equal chunks, input.numel() == size() * output.numel(), one dtype, both contiguous.
  /// Each element is summed in the order all_reduce_sum sums it, so the chunk is bit-identical to
  /// the same chunk of an all-reduce. The default sums the whole input (all_reduce_sum on a copy)
  /// and keeps the chunk: right for any group, without the memory and traffic saving.
  [[nodiscard]] virtual status reduce_scatter_sum(const at::Tensor& input, const at::Tensor& output);
  /// Every rank's `input` side by side in rank order, in every rank's `output`
  /// (output.numel() == size() * input.numel(), one dtype, both contiguous). The default zero-fills
  /// `output`, writes this rank's chunk and sums (adding zeros is exact): right for any group.
  [[nodiscard]] virtual status all_gather(const at::Tensor& input, const at::Tensor& output);
  /// Starts summing `tensors` in place, in the background where the group can (NCCL: on a stream
  /// of its own, after the work queued so far); nobody may touch them until wait_started(). Groups
  /// that cannot sum in the background sum at once (this default).
  [[nodiscard]] virtual status all_reduce_sum_start(const std::vector<at::Tensor>& tensors) {
    return all_reduce_sum(tensors);
  }
  /// Waits for every started sum: they are then visible to later work, as all_reduce_sum's are.
  [[nodiscard]] virtual status wait_started() { return {}; }
  /// True where all_reduce_sum_start really runs in the background: only then does summing
  /// gradients during the backward pass (gradient_reducer.hpp) gain anything.
  virtual bool sums_in_background() const noexcept { return false; }
};

/// `size` ranks that are threads of this process: element r goes to the thread of rank r. Each
/// call blocks until every rank has made it. size >= 1.
std::vector<std::shared_ptr<collective>> make_thread_group(int size);

/// Sums the gradients of `params` across `group` in buckets of about `bucket_bytes` (one flat
/// tensor per bucket and dtype/device, so NCCL sees a few large calls rather than one per tensor).
/// A parameter without a gradient on this rank (its share of the batch had no sample, or its
/// optimiser cleared the gradient to none) takes part as zeros, so every rank makes the same calls.
[[nodiscard]] status all_reduce_gradients(const std::vector<at::Tensor>& params, collective& group,
                                          std::size_t bucket_bytes = 25u << 20);

}  // namespace kforge::trainer

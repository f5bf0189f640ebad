#pragma once
// AdamW with its state sharded over the data-parallel ranks (ZeRO stage 1 and 2): each rank keeps
// only its 1/N of the fp32 master weights, of AdamW's two moments and of the summed gradients,
// instead of all of them (16 bytes a parameter on every rank become 16/N).
//
// step(), on every rank after its backward pass left its own (unsummed) gradients on the
// parameters:
//   1. Gradients, bucket by bucket (consecutive parameters of one dtype, up to bucket_bytes of
//      fp32), are flattened to fp32, padded to a multiple of N, and reduce-scattered: rank r gets
//      chunk r of the bucket's sum. The parameters' full gradients are then dropped (stage 2).
//   2. The global gradient norm is the all-reduced sum of every rank's squared chunk norms; the
//      chunks are clipped with it as grpo_step's clip_grad_norm clips the whole gradient.
//   3. Each rank steps AdamW on its chunks (the formula of torch::optim::AdamW, decoupled weight
//      decay, one step count for all parameters).
//   4. Each rank's updated master chunks, cast to the parameters' dtype (bf16 for a compute copy),
//      are all-gathered into the parameters, so every rank again holds the whole model.
// Lower-precision parameters (bf16, with no fp32 copy of the model on the rank: the masters are
// the shards): a whole-model fp32 gradient would cost the 4 bytes a parameter sharding saves, and
// bf16 would sum micro-batches with 8 bits of mantissa. So the step calls accumulate() after every
// micro-batch instead: step 1 then, into an fp32 sum of this rank's chunks, the micro-batch's
// bf16 gradients dropped at once (ZeRO stage 2's per-micro-batch reduce; one reduce-scatter per
// micro-batch rather than per step). Every rank must call it equally often.
//
// With a thread or socket group the chunks' sums are bit-identical to all_reduce_gradients' sums
// (collective.hpp), so the update equals the unsharded one up to the rounding of the norm (summed
// in another order) — tested against torch::optim::AdamW over 2 and 3 ranks.
//
// Checkpoints: every rank writes its own shard (save_state, to sharded_optimizer_file(rank, N) of
// the checkpoint directory) rather than the head gathering them: the head never holds the whole
// state, and saving costs no collective. Resuming therefore needs the same number of ranks and the
// same bucket_bytes (load_state names the difference); after load_state, gather_weights() on
// every rank puts the restored master weights into the parameters.
//
// LoRA: not for adapters (a few MB of state: sharding would save nothing and cost two collectives
// a step); the manifest refuses trainer.shard_optimizer with trainer.lora.
//
// Includes ATen's Tensor only.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "common/result.hpp"
#include "trainer/collective.hpp"

namespace kforge::trainer {

struct sharded_adamw_options {
  double lr = 3e-6;              ///< > 0
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;     ///< decoupled, as torch::optim::AdamW
  double max_grad_norm = 1.0;    ///< global L2 norm the gradient is clipped to; <= 0: none
  std::size_t bucket_bytes = 25u << 20;  ///< fp32 bytes of gradient per reduce-scatter; > 0
};

/// One bucket of the flat parameter space: parameters [first, last), `numel` elements padded to
/// ranks x `chunk`; rank r owns elements [r * chunk, (r + 1) * chunk) of it.
struct shard_bucket {
  std::size_t first = 0, last = 0;
  std::int64_t numel = 0;
  std::int64_t chunk = 0;
};

/// The buckets of parameters of these sizes and dtypes for `ranks` ranks: consecutive parameters
/// of one dtype up to `bucket_bytes` of fp32 (at least one each).
std::vector<shard_bucket> shard_buckets(const std::vector<at::Tensor>& params, int ranks, std::size_t bucket_bytes);

struct sharded_step_stats {
  bool stepped = false;       ///< false: the norm was not finite, the weights did not change
  double grad_norm = 0;       ///< global gradient norm before clipping
  bool grad_clipped = false;
};

class sharded_adamw {
 public:
  /// `params`: the tensors the model computes with, the same on every rank. `masters` (optional,
  /// same shapes): their fp32 values where `params` are a lower-precision copy; else the master
  /// weights start as `params`. `group` null: one rank. Bad options throw std::invalid_argument.
  sharded_adamw(std::vector<at::Tensor> params, std::shared_ptr<collective> group, sharded_adamw_options o,
                const std::vector<at::Tensor>& masters = {});
  ~sharded_adamw();
  sharded_adamw(sharded_adamw&&) noexcept;
  sharded_adamw& operator=(sharded_adamw&&) noexcept;

  /// Steps 2 to 4 above on the gradients accumulate() summed since the last step; where it was not
  /// called, step 1 first on the gradients now on the parameters. Every rank must call it. A failed
  /// collective is an error on every rank (the gradients are dropped; the weights are unchanged
  /// unless the all-gather itself failed).
  [[nodiscard]] result<sharded_step_stats> step();
  /// Step 1 alone: the gradients now on the parameters reduce-scattered and added to this rank's
  /// fp32 sum, then dropped from the parameters (a parameter without one adds zeros). Every rank
  /// calls it equally often. On error the sum is dropped too.
  [[nodiscard]] status accumulate();
  /// Drops the gradients summed so far (a step that failed elsewhere).
  void clear_gradients() noexcept;
  /// True where the parameters are of a lower precision than fp32: the GRPO step then calls
  /// accumulate() after every micro-batch (see the top of this header).
  bool sums_each_micro_batch() const noexcept;
  /// Step 4 alone: the master weights into the parameters (after load_state). Every rank calls it.
  [[nodiscard]] status gather_weights();

  /// This rank's master weights, moments, step count and the layout they fit (LibTorch's archive
  /// format).
  [[nodiscard]] status save_state(const std::string& path) const;
  /// Restores a save_state() file of the same rank of a group of the same size and buckets; on
  /// error the optimiser is unchanged.
  [[nodiscard]] status load_state(const std::string& path);

  std::int64_t steps() const noexcept;
  /// Elements this rank keeps of each state tensor (padding included).
  std::int64_t shard_numel() const noexcept;
  /// Elements of all parameters.
  std::int64_t total_numel() const noexcept;
  const std::vector<shard_bucket>& buckets() const noexcept;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace kforge::trainer

#pragma once
// One GRPO optimisation step over a batch of groups, for any model: the model is reached only
// through a callable that returns per-token completion log-probs (logprob_fn), so the policy in
// model/ — or a two-layer toy in a test — plugs in the same way.
//
// step(): advantages per group (grpo.hpp) -> samples of skipped groups dropped -> micro-batches of
// micro_batch_size sequences, each: forward, grpo_loss normalised by the token count of the whole
// batch, backward (gradients accumulate) -> grad-norm clipping -> one AdamW update. Because the loss
// of every micro-batch is divided by the batch's token count, the update does not depend on how
// the batch is cut (tested). With data parallel ranks, pass the all-reduced token count instead.
//
// Only grpo_step.cpp pays for the LibTorch C++ API (optimiser, clipping): this header needs
// ATen's Tensor only.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/result.hpp"
#include "trainer/collective.hpp"
#include "trainer/grpo.hpp"
#include "trainer/sharded_adamw.hpp"

namespace kforge::trainer {

/// One completion of a prompt, as the buffer serves it.
struct grpo_sample {
  std::vector<std::int64_t> prompt;      ///< prompt token ids (>= 1: the first completion token
                                         ///< needs a context)
  std::vector<std::int64_t> completion;  ///< completion token ids; these are trained on
  double reward = 0;                     ///< scalar reward of the completion
  std::vector<float> behaviour_logp;     ///< per completion token, under the policy that sampled
                                         ///< it; empty: not known (no off-policy correction)
  std::uint64_t policy_version = 0;      ///< weights version that generated it
  /// One per completion token: 0 leaves the token out of the loss (an observation between an
  /// episode's turns: context, not the model's). Empty: every completion token counts.
  std::vector<std::uint8_t> completion_mask;
};

/// An episode trained under [agent] reward = "turn_returns" (agent/episode.hpp) as one sample per
/// turn: its sample holds the task's prompt, and as the completion its turns with the observations
/// between them (completion_mask 1 on the model's tokens, each turn one run of them). Sample k ends
/// with turn k, is masked to turn k's tokens alone and is rewarded with returns[k], so that GRPO
/// normalises every turn's return over the group's episodes and a turn that broke a correct kernel
/// is not paid for the turn that wrote it. The price: the context of turn k is run once more for
/// each later turn. `returns` holds one per turn; a last turn without tokens (an episode ended
/// because its context was full) gets no sample. Empty when the mask's turns do not match
/// `returns` (the caller keeps the episode whole).
std::vector<grpo_sample> split_by_turn(const grpo_sample& episode, const std::vector<double>& returns);

/// The G completions of one prompt.
struct grpo_group {
  std::vector<grpo_sample> samples;
  /// The rewards the group's mean and std come from, and its all-equal test: every draw of the
  /// policy for the prompt, where the samples are only some of them (the buffer dropped
  /// duplicates). Empty: the samples' own rewards (plain GRPO).
  std::vector<double> baseline;
};

/// Per-token log-probs under a model: for samples s_0..s_{B-1}, a [B, T] tensor (T >= the longest
/// completion) whose [b, t] is log p(s_b.completion[t] | s_b.prompt, s_b.completion[0..t)). Columns
/// past a completion's end are ignored. For the policy it must carry gradients to the parameters
/// given to grpo_stepper; for the reference it is called under no-grad.
using logprob_fn = std::function<at::Tensor(const std::vector<const grpo_sample*>&)>;

/// A batch of prompt + completion sequences laid out for a causal LM: the input of a logprob_fn
/// built on a model that maps [B, L] token ids to [B, L, V] logits.
struct packed_sequences {
  at::Tensor tokens;            ///< [B, L] int64, prompt then completion, right-padded with pad_id
  at::Tensor prompt_lengths;    ///< [B] int64
  at::Tensor completion_lengths;  ///< [B] int64
  std::int64_t max_completion = 0;  ///< T of the log-probs gather_completion_logp returns
};

/// Packs samples for a causal LM; throws std::invalid_argument on an empty prompt.
packed_sequences pack_sequences(const std::vector<const grpo_sample*>& samples,
                                std::int64_t pad_id = 0);

/// From next-token logits [B, L, V] of packed.tokens (logits[b, p] predicts tokens[b, p + 1]), the
/// [B, max_completion] fp32 log-probs of the completion tokens under softmax(logits / temperature)
/// (temperature <= 0: 1, as sampling greedily). Differentiable in logits (token_logprobs).
at::Tensor gather_completion_logp(const at::Tensor& logits, const packed_sequences& packed,
                                  double temperature = 1.0);

/// log softmax(logits[i] / temperature)[targets[i]] for each row i of logits [N, V] (any floating
/// dtype), as fp32 [N], differentiable in logits. Computed `chunk_rows` rows at a time in fp32, and
/// backward recomputes each chunk's softmax: neither the fp32 log-softmax over the vocabulary nor
/// its gradient is ever whole. At 16,384 tokens of a 152,064-word vocabulary those are 9.3 GiB each;
/// what remains is the logits and their gradient, in the logits' dtype.
at::Tensor token_logprobs(const at::Tensor& logits, const at::Tensor& targets, double temperature = 1.0,
                          std::int64_t chunk_rows = 2048);

struct grpo_step_options {
  /// The objective's settings (clip range, advantages, IS cap).
  grpo_options grpo;
  /// AdamW learning rate. > 0.
  double lr = 3e-6;
  /// AdamW first-moment decay.
  double beta1 = 0.9;
  /// AdamW second-moment decay.
  double beta2 = 0.999;
  /// AdamW denominator epsilon.
  double adam_eps = 1e-8;
  /// AdamW decoupled weight decay. 0 by default: pulling the policy back is the KL term's job, and
  /// decay toward 0 would pull a pretrained model away from its reference. >= 0.
  double weight_decay = 0.0;
  /// Global L2 norm the gradient is clipped to; <= 0: no clipping (the norm is still reported).
  double max_grad_norm = 1.0;
  /// Sequences per forward/backward pass; gradients accumulate across them. >= 1.
  std::int64_t micro_batch_size = 8;
  /// Importance-weight samples from older policy versions (policy_version < current version) that
  /// carry behaviour log-probs (grpo.hpp, "Off-policy correction"). Samples of the current version
  /// are treated as on-policy (weight 1).
  bool correct_off_policy = true;
  /// Data parallel on a group that sums in the background (NCCL ranks in processes of their own):
  /// each bucket of gradients is summed across the ranks while the last micro-batch's backward
  /// pass goes on (gradient_reducer.hpp); false, or other groups: after it (all_reduce_gradients).
  /// The same sums of the same numbers (with 3+ NCCL ranks other bucket boundaries may change
  /// NCCL's order of addition, so the last bits). Every rank must have the same setting.
  bool overlap_grad_reduce = true;
  /// Bytes of gradients per bucket of the data-parallel sum. > 0.
  std::size_t grad_bucket_bytes = 25u << 20;
};

/// What one step did: the loss statistics are token-weighted over all micro-batches.
struct grpo_step_stats {
  bool stepped = false;           ///< false: every group was skipped, the weights did not change
  grpo_loss_stats loss;           ///< loss, policy/KL parts, mean KL, ratio, clip and IS stats
  double grad_norm = 0;           ///< global gradient norm before clipping
  bool grad_clipped = false;      ///< grad_norm exceeded max_grad_norm
  std::int64_t micro_batches = 0;
  std::int64_t samples = 0;       ///< samples trained on
  std::int64_t stale_samples = 0; ///< of those, importance-weighted (older policy version)
  /// Data parallel with overlap: gradient buckets this rank started summing during its backward
  /// pass (the rest started after it).
  std::int64_t buckets_reduced_in_backward = 0;
  double kl_coef = 0;             ///< coefficient used
  group_advantages advantages;    ///< group/advantage statistics (and the per-sample values)
};

/// Holds the optimiser across steps. Parameters are the policy's trainable tensors (requires_grad).
class grpo_stepper {
 public:
  grpo_stepper(std::vector<at::Tensor> parameters, grpo_step_options opt);
  /// Sharded optimiser state (ZeRO stage 2, sharded_adamw.hpp): `sharded` is built over the same
  /// `parameters` (the fp32 master weights, or a bf16 model whose fp32 masters exist only as the
  /// ranks' shards: its gradients are then summed into the shard after every micro-batch), the same
  /// rank group step() is given, and lr, betas, eps, weight decay and max_grad_norm from `opt`.
  /// step() then neither sums the gradients across the ranks (no reducer) nor builds an AdamW of
  /// its own (its moments would be the whole model's on every rank): after backward and the
  /// statistics' sum, sharded->step() reduce-scatters the gradients, clips them by the global
  /// norm, steps AdamW on this rank's shard and all-gathers the weights into `parameters` (then
  /// into the compute copies). save_state/load_state refuse: each rank saves its shard through
  /// sharded(). Null: as the constructor above.
  grpo_stepper(std::vector<at::Tensor> parameters, grpo_step_options opt, std::unique_ptr<sharded_adamw> sharded);
  ~grpo_stepper();
  grpo_stepper(grpo_stepper&&) noexcept;
  grpo_stepper& operator=(grpo_stepper&&) noexcept;

  /// One optimisation step over `batch`. `reference` may be empty (no KL term). Samples with a
  /// policy_version below `current_version` are off-policy. Throws std::invalid_argument for
  /// inconsistent input (a log-prob tensor of the wrong shape, behaviour_logp of the wrong length).
  ///
  /// Data parallel (`group` given, trainer/collective.hpp): every rank passes the whole batch and
  /// computes the same advantages; each trains on its contiguous share of the kept samples, the
  /// loss normalised by the whole batch's tokens, so the summed gradients are the whole batch's.
  /// Gradients and statistics are summed across the ranks before clipping, and every rank then
  /// takes the same AdamW step: the ranks' weights stay identical and equal (within rounding) to
  /// one rank's on the whole batch. Throws std::runtime_error when a collective fails (the
  /// gradients are then cleared and the weights unchanged). With a sharded optimiser only the
  /// statistics are summed here; the gradients go to sharded_adamw::step() (see the constructor).
  grpo_step_stats step(const std::vector<grpo_group>& batch, const logprob_fn& policy,
                       const logprob_fn& reference, double kl_coef,
                       std::uint64_t current_version, collective* group = nullptr);

  /// Mixed precision: `compute` are lower-precision copies of the parameters (same order and
  /// shapes) that the log-prob functions run forward and backward on. step() then moves their
  /// gradients into the parameters' (fp32) before summing across ranks and clipping, takes the AdamW
  /// step on the parameters, and copies them back into `compute`. Empty: the parameters themselves
  /// are computed on.
  void set_compute_parameters(std::vector<at::Tensor> compute);

  const grpo_step_options& options() const noexcept;
  /// AdamW steps taken.
  std::int64_t steps() const noexcept;
  /// The sharded optimiser, or null (unsharded).
  sharded_adamw* sharded() noexcept;
  const sharded_adamw* sharded() const noexcept;

  /// Writes the optimiser state to `path` (LibTorch's archive format): AdamW's moments and
  /// per-parameter step counts, its hyper-parameters, and steps(). With the same weights, a stepper
  /// that load_state()s it takes bit-identical steps to this one.
  [[nodiscard]] status save_state(const std::string& path) const;
  /// Restores a save_state() file into this stepper, whose parameters must be in the same order and
  /// shapes as the saver's. The hyper-parameters stay this stepper's options (LibTorch does not
  /// restore them from the file). On error the stepper is unchanged.
  [[nodiscard]] status load_state(const std::string& path);

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace kforge::trainer

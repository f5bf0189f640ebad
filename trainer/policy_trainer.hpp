#pragma once
// GRPO on the policy model: a TrainBatch in, one optimisation step of a kforge::model causal LM
// out, with a frozen copy of the starting weights as the KL reference, the adaptive KL coefficient
// (kl_controller) and checkpoint / resume (checkpoint.hpp).
//
// step(): the batch's groups (excluded samples dropped) -> grpo_stepper::step with the policy's and
// the reference's completion log-probs (prompt + completion packed right-padded, one forward each,
// logits divided by the sampling temperature as the sampler's behaviour log-probs were) and the
// controller's coefficient -> the controller sees the step's mean KL -> the policy version rises
// by one. It rises with every batch consumed, even one with no signal (all groups equal), because
// the pipeline paces generation and staleness by it: a version that stood still would stall a sync
// run. Every step's statistics go to the log sink.
//
// Resume: build the trainer from the same starting checkpoint (the reference is those weights),
// then load_checkpoint(): policy weights, optimiser, KL controller, step, version and LibTorch's
// default generators are restored, so the run continues exactly as the uninterrupted one would
// (tested bit for bit on CPU). Random numbers the trainer's caller draws elsewhere (e.g. a sampler's
// seed) must come from the default generator or from (seed, step) to be covered.
//
// LoRA (options.lora): adapters (model/lora.hpp) on the policy are all that trains; the base
// weights are frozen, in the compute dtype (bf16 with bf16_compute: no fp32 copy of them), the
// adapters stay fp32 and are what AdamW steps. There is no compute copy and no reference copy: the
// reference is the policy with its adapters off, so policy(), compute_model() and reference() are
// one model. Checkpoints then also hold the adapters in PEFT's layout (checkpoint.hpp), and
// load_checkpoint() restores the adapters (the base is the starting checkpoint's, as built).
//
// Includes LibTorch through model/transformer.hpp.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/result.hpp"
#include "model/lora.hpp"
#include "model/transformer.hpp"
#include "trainer/grpo_step.hpp"
#include "trainer/kl_controller.hpp"
#include "trainer/train_batch.hpp"

namespace kforge::trainer {

struct policy_trainer_options {
  /// Objective and optimiser (clip range, advantages, AdamW, grad clipping, micro-batches).
  grpo_step_options step;
  /// The adaptive KL coefficient.
  kl_controller_options kl;
  /// Take a group's reward mean and std (and whether it is all-equal) from its draw_rewards where
  /// it has them, instead of from the samples kept for training. With the buffer's dedup the kept
  /// samples are the policy's rarer kernels: a group whose repeated correct kernel was dropped
  /// keeps only its wrong ones, all-equal among themselves, and would teach nothing.
  bool baseline_from_draws = false;
  /// Temperature the samples were drawn at: the trainer's log-probs are log_softmax(logits / T),
  /// as the behaviour log-probs of model/generate.hpp are (0 is read as 1, as there). > 0 or 0.
  double temperature = 1.0;
  /// Token placed in padding positions (never scored).
  std::int64_t pad_token = 0;
  /// Policy version of the starting weights.
  std::uint64_t initial_version = 0;
  /// The run's seed, kept in checkpoints for the caller's (seed, step)-derived streams.
  std::uint64_t seed = 0;
  /// Mixed precision: forward and backward run on a bf16 copy of the policy (and the reference is
  /// kept in bf16); the policy itself — the master weights that are published and checkpointed —
  /// its gradients and AdamW's state stay in the policy's dtype (fp32). The copy is refreshed
  /// after every step and after a checkpoint is loaded.
  bool bf16_compute = false;
  /// Data parallel: this rank's group (trainer/collective.hpp). Every rank builds its trainer from
  /// the same checkpoint and steps on the same batches; grpo_stepper::step splits each batch and
  /// sums the gradients. Null: one rank. Checkpoints and published weights are rank 0's job (the
  /// ranks' weights are identical).
  std::shared_ptr<collective> group;
  /// LoRA adapters instead of full fine-tuning (see the top of this header); nullopt: every
  /// parameter trains. Their `seed` initialises A the same way on every rank.
  std::optional<model::lora_options> lora;
  /// Full fine-tuning with AdamW's state sharded over `group`'s ranks (sharded_adamw.hpp, ZeRO
  /// stage 2): each rank keeps 1/N of the fp32 master copy, of the summed gradients and of the
  /// moments, and the gradients are reduce-scattered instead of all-reduced. The model computed
  /// on stays whole on every rank (the optimiser all-gathers it after each step); with
  /// bf16_compute that is the bf16 copy alone — no rank keeps an fp32 one, policy() is the bf16
  /// model and model.safetensors holds bf16 weights. Checkpoints hold one optimiser shard per rank
  /// (save_checkpoint). Every rank must have the same setting. Refused with `lora`
  /// (invalid_argument).
  bool shard_optimizer = false;
  /// Recompute each decoder layer in backward (model/layer_checkpoint.hpp): the same gradients,
  /// less activation memory.
  bool activation_checkpointing = false;
  /// The checkpoint the policy was loaded from. Non-empty: checkpoints also get its config.json,
  /// generation_config.json and tokenizer files (model::save_checkpoint), so they load as models.
  std::string source_dir;
};

/// What one step did, for the log.
struct policy_step_stats {
  std::int64_t step = 0;               ///< batches consumed, this one included
  std::uint64_t batch_step = 0;        ///< the batch's own TrainBatch.step
  std::uint64_t policy_version = 0;    ///< version of the weights after this step
  grpo_step_stats grpo;                ///< loss, KL, clip, IS and advantage statistics
  kl_update kl;                        ///< coefficient for the next step and the window mean
  std::int64_t excluded_samples = 0;   ///< samples dropped for Scored.excluded
  /// Episodes with turn_returns trained as one sample a turn (split_by_turn), and those trained
  /// whole on their reward: turns that did not match their returns, or alone in their group.
  std::int64_t split_episodes = 0;
  std::int64_t whole_episodes = 0;
  std::int64_t completion_tokens = 0;  ///< completion tokens trained on
  double seconds = 0;                  ///< wall time of the step
};

/// One line "step=.. version=.. loss=.. kl=.. kl_coef=.. kl_window=.. ..." for logs.
std::string format_step_log(const policy_step_stats& s);

class policy_trainer {
 public:
  using log_sink = std::function<void(const policy_step_stats&)>;

  /// Trains `policy` in place (its parameters must require grad). The reference is a frozen copy of
  /// its weights now (with LoRA: the policy with its adapters off). Invalid options throw
  /// std::invalid_argument (a bug in the caller).
  policy_trainer(model::CausalLM policy, policy_trainer_options options);
  ~policy_trainer();
  policy_trainer(policy_trainer&&) noexcept;
  policy_trainer& operator=(policy_trainer&&) noexcept;

  /// One GRPO step over `batch`. Errors (inconsistent samples, tokens outside the vocabulary, an
  /// empty prompt) leave the weights unchanged.
  [[nodiscard]] result<policy_step_stats> step(const train_batch& batch);

  /// With shard_optimizer, makes every other rank of the group write its optimiser shard into
  /// `tmp_dir` (save_optimizer_shard) before this rank's save_checkpoint commits it.
  using shard_writer = std::function<status(const std::string& tmp_dir)>;
  /// Writes a checkpoint directory (checkpoint.hpp), replacing one already at `dir`. One rank
  /// writes for all (the ranks' weights are identical); with shard_optimizer over 2+ ranks,
  /// `other_shards` must have the other ranks add their shards (without it: an error, nothing
  /// replaced), since a checkpoint missing one could not be resumed.
  [[nodiscard]] status save_checkpoint(const std::string& dir, const shard_writer& other_shards = {});
  /// With shard_optimizer: this rank's optimiser shard into `dir` (checkpoint.hpp
  /// sharded_optimizer_file); no collective, so ranks may write in any order. Else nothing.
  [[nodiscard]] status save_optimizer_shard(const std::string& dir) const;
  /// Restores a save_checkpoint() directory into this trainer (built as the saver was; with
  /// shard_optimizer, as the same rank of a group of the same size: it reads its own shard). On
  /// error the trainer may be partly restored: build a fresh one before trying again.
  [[nodiscard]] status load_checkpoint(const std::string& dir);

  /// Called after every step with its statistics (none by default).
  void set_log_sink(log_sink sink);

  /// The LoRA adapters alone in PEFT's layout under `dir` (model/lora.hpp save_lora), their base
  /// the checkpoint the policy was loaded from: what servers load with their adapter endpoints.
  /// An error without trainer LoRA.
  [[nodiscard]] status save_adapters(const std::string& dir) const;

  /// The weights optimised, checkpointed and published: fp32 masters, or with LoRA the base and
  /// adapters, or with shard_optimizer and bf16_compute the bf16 model (the masters are shards).
  model::CausalLM& policy() noexcept;
  /// What forward and backward run on: the policy itself, or (bf16_compute) its bf16 copy, equal to
  /// the policy rounded to bf16 after every step. The weights a bf16 sampler needs.
  model::CausalLM& compute_model() noexcept;
  const model::CausalLM& reference() const noexcept;
  const kl_controller& kl() const noexcept;
  const grpo_stepper& stepper() const noexcept;
  /// Batches consumed.
  std::int64_t steps() const noexcept;
  /// Version of the current weights.
  std::uint64_t policy_version() const noexcept;
  const policy_trainer_options& options() const noexcept;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace kforge::trainer

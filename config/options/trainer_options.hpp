#pragma once
// Settings of the trainer stage (GRPO), from the manifest's [trainer] table.

#include <cstdint>
#include <string>
#include <vector>

namespace kforge {

/// What the trainer's forward and backward run in (the master weights and AdamW stay fp32).
enum class trainer_compute { automatic, bf16, fp32 };
/// How new weights reach the samplers: "auto" (an NCCL broadcast where every sampler is an engine
/// on a GPU of its own, else a file), "file" or "nccl" (an error where it cannot be).
enum class weights_publish { automatic, file, nccl, adapters };
/// Where the trainer's data-parallel ranks run: threads of the trainer's process, or a process
/// each (stages/trainer_ranks.hpp), started by the trainer on its host.
enum class trainer_ranks { threads, processes };
/// Where a GRPO group's reward mean and std come from: the samples the buffer kept for training,
/// or every draw of the policy for the group that got a reward (the dropped duplicates included).
enum class group_baseline { kept, draws };

/// Upper bounds of kl_window (the KL controller keeps that many steps' values) and micro_batch
/// (sequences in one pass): far above any real setting, a larger value is a typo.
inline constexpr std::int64_t max_kl_window = 1 << 20;
inline constexpr std::int64_t max_micro_batch = 4096;

/// The projections a LoRA adapter may sit on (model/lora.hpp's lora_target_names; kept here too so
/// that the manifest is checked without the model library).
inline const std::vector<std::string>& lora_projection_names() {
  static const std::vector<std::string> names{"q_proj", "k_proj", "v_proj", "o_proj",
                                              "gate_proj", "up_proj", "down_proj"};
  return names;
}

/// [trainer] lora: LoRA adapters (model/lora.hpp) instead of full fine-tuning.
struct trainer_lora {
  /// The table is in the manifest: adapters are trained, the base weights frozen.
  bool enabled = false;
  /// Rank of the adapters. In [1, 4096].
  std::int64_t rank = 16;
  /// Their scale is alpha / rank. > 0.
  double alpha = 32;
  /// Dropout on the adapters' input while training. In [0, 1).
  double dropout = 0;
  /// Projections of every decoder layer that get an adapter (lora_projection_names). Not empty.
  std::vector<std::string> targets{"q_proj", "k_proj", "v_proj", "o_proj"};
};

struct trainer_options {
  /// AdamW learning rate. > 0.
  double lr = 3e-6;
  /// Initial coefficient of the KL penalty to the reference policy (k3 estimator). >= 0.
  double kl_coef = 0.04;
  /// Lower end of the target band for the mean KL; below it the coefficient shrinks. >= 0.
  double kl_target_low = 1e-3;
  /// Upper end of the target band; above it the coefficient grows. > kl_target_low.
  double kl_target_high = 5e-3;
  /// Steps over which the mean KL is taken before the coefficient is adjusted. In
  /// [1, max_kl_window].
  std::int64_t kl_window = 100;
  /// Factor the coefficient is multiplied (KL above the band) or divided (below) by. > 1.
  double kl_step = 1.5;
  /// Policy ratio clipped below at 1 - clip_eps_low. In (0, 1).
  double clip_eps_low = 0.2;
  /// Policy ratio clipped above at 1 + clip_eps_high; larger than low lets rare good tokens grow
  /// (DAPO's clip-higher). > 0.
  double clip_eps_high = 0.28;
  /// "kept" or "draws" (trainer/policy_trainer.hpp, baseline_from_draws).
  group_baseline baseline = group_baseline::kept;
  /// Sequences per forward/backward pass; gradients accumulate across them. In
  /// [1, max_micro_batch].
  std::int64_t micro_batch = 8;
  /// Global gradient L2 norm is clipped to this; 0 disables clipping. >= 0.
  double max_grad_norm = 1.0;
  /// A full checkpoint (weights, optimiser, KL controller, RNG) every this many steps under
  /// RUN_DIR/checkpoints; 0: none. >= 0.
  std::int64_t checkpoint_every = 50;
  /// Data-parallel ranks when the trainer runs on the CPU (its GPU group is empty): threads of the
  /// trainer's process that split each batch and sum gradients in rank order, giving the one-rank
  /// result within rounding. For exercising the data-parallel path without GPUs; on GPUs there is
  /// one rank per GPU of the trainer's group. 1 to 64.
  std::int64_t cpu_ranks = 1;
  /// "threads" (the ranks are threads of the trainer's process) or "processes" (rank 0 in the
  /// trainer's process, every other rank a `kforge trainer-rank` process it starts: gradients summed
  /// over NCCL on GPUs, over a ZeroMQ socket on the CPU). Matters with 2 or more ranks.
  trainer_ranks ranks = trainer_ranks::threads;
  /// With ranks = "processes": this many more ranks join from other hosts, each started there as
  /// `kforge trainer-rank --connect RANK_ENDPOINT --device N` (N: its GPU, -1 for the CPU). >= 0.
  std::int64_t remote_ranks = 0;
  /// Where rank 0 waits for those ranks: tcp://HOST:PORT, HOST an address the other hosts reach
  /// (rank 0 listens on that address only). CPU ranks sum over the next port, PORT + 1.
  std::string rank_endpoint;
  /// Ranks in processes of their own on GPUs sum each bucket of gradients while the backward pass
  /// goes on (trainer/gradient_reducer.hpp), at the cost of one fp32 copy of the gradients per GPU
  /// (4 bytes a parameter); false: after it, without that memory.
  bool overlap_grad_reduce = true;
  /// "auto" (bf16 on GPUs, fp32 on the CPU, where bf16 is slow), "bf16" or "fp32".
  trainer_compute compute = trainer_compute::automatic;
  /// How new weights reach the samplers (config/weights_publish.hpp).
  weights_publish publish = weights_publish::automatic;
  /// LoRA adapters; off by default (full fine-tuning).
  trainer_lora lora;
  /// Full fine-tuning over 2+ data-parallel ranks: fp32 master weights, AdamW's moments and the
  /// summed gradients sharded over the ranks (trainer/sharded_adamw.hpp), 16/N bytes a parameter
  /// on each of N ranks instead of 16. Refused with lora (adapters are small: nothing to save).
  bool shard_optimizer = false;
  /// Recompute each decoder layer in backward instead of keeping its activations
  /// (model/layer_checkpoint.hpp): the same gradients, less memory, about one more forward pass.
  bool activation_checkpointing = false;
  /// NCCL publishing: how long the trainer waits for every sampler to take a version (they take
  /// it between generation batches), and a sampler for the trainer's broadcast, before the
  /// channel is given up and weights go by file. > 0.
  double publish_timeout_s = 600;
};

}  // namespace kforge

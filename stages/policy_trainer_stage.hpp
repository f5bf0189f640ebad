#pragma once
// The real trainer behind the trainer actor: GRPO on the policy model (trainer/policy_trainer.hpp)
// over the TrainBatch messages of the buffer, and weight publishing by file.
//
// train(): the batch's Scored samples (prompt and completion tokens, behaviour log-probs, reward,
// exclusion, policy version) -> one policy_trainer step -> the new weights written as one
// safetensors file RUN_DIR/weights/policy-vN.safetensors (Hugging Face names, in the trainer's
// compute dtype: bf16 on GPUs by default, fp32 on the CPU; checkpoints keep the fp32 masters; written under a
// temporary name and renamed, so a sampler never sees half a file) -> a PolicyWeights message
// {version N, transport file, path, bytes}. Samplers load it between generation batches
// (engine_sampler set_weights). The newest `keep_weights` files stay; older ones are removed (a
// sampler holding an open file keeps reading it). Every step appends one JSON line of statistics to
// RUN_DIR/train.jsonl (loss, KL and its coefficient, reward, clipping, tokens, seconds), and every
// trainer.checkpoint_every steps a full checkpoint goes to RUN_DIR/checkpoints/step-N.
//
// checkpoint() (the run's stop asks for it): the same checkpoint for the current step, unless that
// step's is already written; trainer::save_checkpoint writes it under a temporary name and renames
// it, so a directory named step-N is always whole. A run resumed from step-N (resume_from) goes on
// from there, and appends to train.jsonl.
//
// The version is the number of batches consumed: it rises by one per batch even when no group
// carried a signal, because the run paces generation and staleness by it.
//
// Data parallel (trainer/data_parallel_trainer.hpp): one rank per GPU of the trainer's group, each
// a thread of this process, gradients summed over NCCL; on the CPU, trainer.cpu_ranks ranks (1 by
// default) summing in rank order. With trainer.ranks = "processes" every rank but rank 0 is a
// `kforge trainer-rank` process of its own that this stage starts and drives
// (stages/trainer_ranks.hpp; NCCL on GPUs, trainer/socket_group.hpp on the CPU). Rank 0
// publishes and checkpoints (the ranks' weights are identical). Ranks on other hosts join as
// trainer.remote_ranks (stages/trainer_ranks.hpp).
//
// Publishing by NCCL (trainer.publish, config/weights_publish.hpp): instead of a file, rank 0
// starts a broadcast of the compute copy to the samplers (trainer/weight_broadcast.hpp) and the
// message says so; the step returns at once. Should the broadcast fail or time out, the trainer says
// so on stderr and publishes files from then on. train.jsonl records each step's transport and the
// seconds publishing took (with NCCL: mostly the wait for the version before, when the samplers
// have not taken it yet). This header is torch-free.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/logic_interfaces.hpp"
#include "common/result.hpp"
#include "config/options/trainer_options.hpp"

namespace kforge::pipeline {

struct manifest;

struct policy_trainer_stage_options {
  /// Checkpoint directory of the starting policy (sampler.model): also the KL reference.
  std::string model_dir;
  /// One data-parallel rank per entry: a CUDA device ordinal each, or -1 (every entry) for CPU
  /// ranks. Weights and optimiser state are fp32 either way; forward and backward run in bf16 or
  /// fp32 as trainer.compute says.
  std::vector<int> devices{-1};
  /// Where weights/, checkpoints/ and train.jsonl go.
  std::string run_dir;
  /// The manifest's [trainer] table.
  trainer_options trainer;
  /// Forward and backward in bf16 on the fp32 masters: trainer.compute resolved for `devices`
  /// ("auto": bf16 on GPUs, fp32 on the CPU).
  bool bf16_compute = false;
  /// Temperature the samplers draw at (sampler.temperature): the trainer's log-probs use it too.
  double temperature = 1.0;
  std::uint64_t seed = 0;
  /// Weight files kept on disk (newest first). >= 1; the run sets max_staleness + 2 so a sampler
  /// that lags by the allowed staleness still finds its file.
  int keep_weights = 4;
  /// A checkpoint directory (RUN_DIR/checkpoints/step-N) to continue from: policy, optimiser, KL
  /// controller, step and RNG are loaded from it after the trainer is built from model_dir (still
  /// the KL reference). Empty: start at step 0.
  std::string resume_from;
  /// > 0: publish by NCCL broadcast to a group of this many ranks (the trainer's first GPU and
  /// every sampler: config/weights_publish.hpp); 0: by file.
  int publish_ranks = 0;
  /// Publish each version's LoRA adapters (a PEFT directory) instead of merged weights
  /// (trainer.publish = "adapters").
  bool publish_adapters = false;
  /// Why weights go the way they go (the run's log says it at start).
  std::string publish_reason;
  /// The manifest's text: rank processes (trainer.ranks = "processes") build their trainers from it.
  std::string manifest_text;
  /// The program rank processes run as (`PROGRAM trainer-rank`); empty: this executable.
  std::string rank_program;
};

/// Loads the policy and builds the trainer. Errors name the checkpoint and what is wrong.
[[nodiscard]] result<std::shared_ptr<actors::trainer_logic>> make_policy_trainer_stage(
    const policy_trainer_stage_options& o);

/// `kforge trainer-rank`: one data-parallel rank in a process of its own, driven by the trainer
/// stage (protocol: stages/trainer_ranks.hpp): over fd 3 when `connect` is empty (a child of the
/// trainer), else over ZeroMQ from another host, connecting to rank 0 at `connect`
/// (trainer.rank_endpoint) with `device` (-1: the CPU). Returns the exit code.
int trainer_rank_main(const std::string& connect = "", int device = -1);

/// The options for a manifest and the run directory: sampler.model, [trainer], sampler.temperature,
/// run.seed, buffer.max_staleness and the GPUs of the trainer's group (or trainer.cpu_ranks CPU ranks).
[[nodiscard]] result<policy_trainer_stage_options> policy_trainer_stage_options_from(
    const manifest& m, const std::string& run_dir);

}  // namespace kforge::pipeline

#pragma once
// How the trainer's new weights reach the samplers: by NCCL broadcast (trainer/weight_broadcast.hpp)
// or by file (a safetensors file under RUN_DIR/weights and a PolicyWeights message). The trainer
// and every sampler work the plan out alone from the same manifest, so they agree on it and on the
// samplers' ranks without talking first.
//
// NCCL needs every sampler to be an engine on a GPU of its own: the samplers of a process all use
// the first GPU of their group (stage_gpus), so that means one sampler per process and one sampler
// process per node, on a GPU the trainer does not use (NCCL refuses two ranks on one GPU). The
// trainer is rank 0 (its first GPU); the samplers are ranks 1..n in the manifest's process order.
// "auto" also keeps to the trainer's node: another node may have no NCCL network to it, and
// resolves its "auto" GPU groups from its own GPUs (every process must work out the same plan);
// an explicit "nccl" vouches for both. With trainer.lora the weights go by file (merged), or with
// "adapters" the adapters alone (megabytes, not the model's gigabytes).

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "common/result.hpp"
#include "config/options/trainer_options.hpp"

namespace kforge::pipeline {

struct manifest;

struct weights_publish_plan {
  bool nccl = false;
  /// trainer.publish = "adapters": each version's LoRA adapters (a PEFT directory), which engine
  /// samplers apply unmerged and the openai sampler has its servers load
  /// (stages/openai_client.hpp load_adapter).
  bool adapters = false;
  /// nccl: the trainer and every sampler.
  int ranks = 0;
  /// nccl: each sampler process's rank (its one sampler's).
  std::map<std::string, int> sampler_rank;
  /// Why this transport, for the run's log ("trainer.publish = \"file\"", "the samplers run on
  /// the CPU", ...).
  std::string reason;
};

/// The plan for `m`, with its GPU groups as resolve_gpu_groups gives them on this host (every
/// node resolves "auto" groups the same way) and `nccl_built`: whether this kforge has NCCL. An
/// error when trainer.publish = "nccl" and NCCL cannot be used, or "adapters" without trainer.lora
/// or with stand-in samplers; the error says why.
result<weights_publish_plan> plan_weights_publish(const manifest& m,
                                                  const std::map<std::string, std::vector<int>>& groups,
                                                  bool nccl_built);

/// The plan with the GPU groups resolved on this host (what the trainer and the samplers use).
result<weights_publish_plan> plan_weights_publish(const manifest& m, bool nccl_built);

/// trainer.publish_timeout_s as the weight channel takes it.
std::chrono::milliseconds publish_timeout(const trainer_options& t);

}  // namespace kforge::pipeline

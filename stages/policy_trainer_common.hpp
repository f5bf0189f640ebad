#pragma once
// What the trainer stage (policy_trainer_stage.cpp, rank 0) and its rank processes
// (trainer_rank_command.cpp, ranks 1..N-1) build the same way: every rank's data-parallel settings
// from the stage options, and joining the ranks' group (the plain batch of a TrainBatch message:
// train_batch_of.hpp). Internal to those two translation units; includes LibTorch (data_parallel_trainer.hpp).

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "common/hex.hpp"
#include "messages/train_generated.h"
#include "stages/policy_trainer_stage.hpp"
#include "stages/train_batch_of.hpp"
#include "trainer/data_parallel_trainer.hpp"
#include "trainer/socket_group.hpp"
#if defined(KFORGE_WITH_CUDA)
#include "trainer/nccl_group.hpp"
#endif

namespace kforge::pipeline::policy_trainer_detail {

/// Every rank's data-parallel settings from the stage options (the devices and the trainer).
inline trainer::data_parallel_options dp_options(const policy_trainer_stage_options& o) {
  trainer::data_parallel_options dp;
  dp.model_dir = o.model_dir;
  for (int d : o.devices)
    dp.devices.push_back(d >= 0 ? at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(d)) : at::Device(at::kCPU));
  trainer::policy_trainer_options po;
  const auto& t = o.trainer;
  po.step.lr = t.lr;
  po.step.max_grad_norm = t.max_grad_norm;
  po.step.micro_batch_size = t.micro_batch;
  po.step.overlap_grad_reduce = t.overlap_grad_reduce;
  po.step.grpo.clip_eps_low = t.clip_eps_low;
  po.step.grpo.clip_eps_high = t.clip_eps_high;
  po.baseline_from_draws = t.baseline == group_baseline::draws;
  po.kl.initial_coef = t.kl_coef;
  po.kl.target_low = t.kl_target_low;
  po.kl.target_high = t.kl_target_high;
  po.kl.window = t.kl_window;
  po.kl.step = t.kl_step;
  po.bf16_compute = o.bf16_compute;
  if (t.lora.enabled) {
    model::lora_options lo;
    lo.rank = t.lora.rank;
    lo.alpha = t.lora.alpha;
    lo.dropout = t.lora.dropout;
    lo.targets = t.lora.targets;
    lo.seed = o.seed;  // every rank draws the same A
    po.lora = lo;
  }
  po.shard_optimizer = t.shard_optimizer;
  po.activation_checkpointing = t.activation_checkpointing;
  po.temperature = o.temperature;
  po.seed = o.seed;
  po.source_dir = o.model_dir;
  dp.trainer = po;
  return dp;
}

/// How long a rank in a process of its own may take to join (load the model) or to step.
inline constexpr std::chrono::minutes rank_join_timeout{10};
inline constexpr std::chrono::minutes rank_step_timeout{30};

/// This process's rank of a group joined as `collective` says ("socket": at `endpoint`; "nccl":
/// with the unique id in hex), on CUDA device `device` (-1: the CPU). `give_up`: see socket_group
/// and nccl_group (true ends a wait: a rank process has failed).
inline result<std::shared_ptr<trainer::collective>> join_rank_group(const std::string& collective, const std::string& endpoint,
                                                             const std::string& nccl_id_hex, int rank, int size,
                                                             int device, std::function<bool()> give_up = {}) {
  if (collective == "socket")
    return trainer::make_socket_group(endpoint, rank, size, rank_step_timeout, std::move(give_up));
  if (collective != "nccl") return error{"unknown collective '" + collective + "'"};
#if defined(KFORGE_WITH_CUDA)
  trainer::nccl_id id;
  if (!from_hex(nccl_id_hex, id.bytes.data(), id.bytes.size())) return error{"a malformed NCCL unique id"};
  trainer::nccl_group_options o;
  o.join_timeout = rank_join_timeout;
  o.timeout = rank_step_timeout;
  o.give_up = std::move(give_up);
  o.background_sums = true;  // one rank per process: gradients are summed during backward
  return trainer::make_nccl_group(id, rank, size, device, std::move(o));
#else
  (void)nccl_id_hex;
  (void)device;
  return error{"NCCL ranks need a kforge built with CUDA"};
#endif
}

}  // namespace kforge::pipeline::policy_trainer_detail

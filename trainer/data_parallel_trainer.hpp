#pragma once
// Data-parallel GRPO in one process: one policy_trainer per device of the trainer's group, each on
// its own thread, every one stepping on every batch (grpo_stepper gives each rank its share and sums
// the gradients: trainer/collective.hpp). CPU ranks join a thread group; CUDA ranks an NCCL group
// (CUDA builds only: trainer/nccl_group.hpp), its unique id made here and handed to each rank's
// thread. The ranks' weights are identical after every step, so rank 0 stands for the group: its
// policy is the one published and checkpointed, and a checkpoint is loaded into every rank.
//
// One device: one rank on the caller's thread with no group, exactly the single-device trainer.
// One device and a `group`: this process holds one rank of a group whose other ranks are other
// processes (stages/trainer_ranks.hpp starts and drives them); the group is joined before.
//
// Includes LibTorch through policy_trainer.hpp.

#include <memory>
#include <string>
#include <vector>

#include "common/result.hpp"
#include "trainer/policy_trainer.hpp"

namespace kforge::trainer {

struct data_parallel_options {
  /// Checkpoint directory every rank loads (fp32; a LoRA base computed in bf16: bf16): the starting
  /// policy and the KL reference.
  std::string model_dir;
  /// One rank per entry: all CPU, or all distinct CUDA devices. Not empty.
  std::vector<at::Device> devices;
  /// Every rank's trainer settings (the group is set per rank).
  policy_trainer_options trainer;
  /// Set: the one rank of `devices` is rank group->rank() of this group, already joined (its other
  /// ranks live in other processes). Unset: the group is made here from `devices`.
  std::shared_ptr<collective> group;
  /// NCCL ranks made here (threads of this process) sum gradients in the background during the
  /// backward pass too. Off by default: nccl_group_options::background_sums says why; trainer_bench
  /// turns it on to measure the overlap.
  bool in_process_background_sums = false;
};

class data_parallel_trainer {
 public:
  /// Loads the policy onto every device and joins the ranks. Errors name the rank and the cause.
  [[nodiscard]] static result<std::unique_ptr<data_parallel_trainer>> create(const data_parallel_options& o);
  /// Releases the ranks together (NCCL teardown may wait for the whole group).
  ~data_parallel_trainer();

  /// One step of every rank over `batch`; rank 0's statistics (the group's: summed across ranks).
  [[nodiscard]] result<policy_step_stats> step(const train_batch& batch);
  /// Rank 0's checkpoint (policy_trainer::save_checkpoint). With shard_optimizer every rank of this
  /// process adds its optimiser shard; where this process holds one rank of a larger group,
  /// `remote_shards` must have the other processes' ranks add theirs.
  [[nodiscard]] status save_checkpoint(const std::string& dir, const policy_trainer::shard_writer& remote_shards = {});
  /// Loads `dir` into every rank.
  [[nodiscard]] status load_checkpoint(const std::string& dir);

  /// Rank 0's trainer: its policy, steps and version are the group's.
  policy_trainer& lead() noexcept { return *ranks_.front(); }
  /// Rank r's trainer (0 <= r < ranks()): for checks that the ranks agree.
  policy_trainer& rank(int r) { return *ranks_.at(static_cast<std::size_t>(r)); }
  int ranks() const noexcept { return static_cast<int>(ranks_.size()); }

 private:
  data_parallel_trainer() = default;
  std::vector<std::unique_ptr<policy_trainer>> ranks_;
};

}  // namespace kforge::trainer

#pragma once
// The trainer's checkpoint directory and the torch-free part of its contents.
//
// A checkpoint is a directory:
//   model.safetensors     policy weights, Hugging Face names (model/weights.hpp); with config.json,
//                         generation_config.json and tokenizer files when the trainer knows the
//                         checkpoint it started from, so the directory is a loadable model too
//   adapter_config.json,  with LoRA only: the adapters in Hugging Face PEFT's layout
//   adapter_model.safetensors  (model/lora.hpp); model.safetensors then holds the merged weights
//   optimizer.pt          AdamW state and the stepper's step count (grpo_stepper::save_state)
//   optimizer-rank-R-of-N.pt  instead, with sharded optimiser state: rank R's shard, written by
//                         rank R itself (sharded_adamw::save_state); resuming needs N ranks again
//   trainer_state.json    this file's trainer_state: step, policy version, seed, KL controller
//                         state, RNG states
// It is written into `<dir>.tmp` and swapped into place only when complete (commit_checkpoint_dir),
// so a crash while saving leaves the previous checkpoint readable.
//
// Plain C++ (no LibTorch): the RNG states travel as the opaque bytes Generator::get_state() gives.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.hpp"

namespace kforge::trainer {

inline constexpr const char* checkpoint_weights_file = "model.safetensors";
inline constexpr const char* checkpoint_optimizer_file = "optimizer.pt";
inline constexpr const char* checkpoint_state_file = "trainer_state.json";

/// Rank `rank`'s shard of a sharded optimiser's state, in a checkpoint of a group of `ranks`.
inline std::string sharded_optimizer_file(int rank, int ranks) {
  return "optimizer-rank-" + std::to_string(rank) + "-of-" + std::to_string(ranks) + ".pt";
}

/// Everything of a resumable run that is not a tensor of the model or the optimiser.
struct trainer_state {
  std::int64_t step = 0;               ///< training batches consumed (steps, skipped ones included)
  std::uint64_t policy_version = 0;    ///< version of the saved weights
  std::uint64_t seed = 0;              ///< the run's seed
  std::string kl_controller;           ///< kl_controller::to_json()
  std::vector<std::uint8_t> cpu_rng;   ///< LibTorch's default CPU generator state
  std::vector<std::vector<std::uint8_t>> cuda_rng;  ///< default CUDA generator per device
};

/// JSON text of a state (RNG bytes as hex; the KL controller state nested as an object).
std::string to_json(const trainer_state& state);
/// Parses to_json() output; `source` (the file) prefixes every error.
[[nodiscard]] result<trainer_state> parse_trainer_state(std::string_view text, const std::string& source);

/// Reads `dir`/trainer_state.json.
[[nodiscard]] result<trainer_state> read_trainer_state(const std::string& dir);
/// Reads the state of the checkpoint in `dir` and checks it against the directory's name: a
/// checkpoint named step-N (a run's RUN_DIR/checkpoints/step-N) must hold step N, or a resume
/// announced at step N would go on from another. A directory of another name is not checked.
[[nodiscard]] result<trainer_state> read_checkpoint_state(const std::string& dir);
/// Writes `dir`/trainer_state.json.
[[nodiscard]] status write_trainer_state(const std::string& dir, const trainer_state& state);

/// A fresh, empty `<dir>.tmp` to write a checkpoint into (any stale one removed); returns its path.
[[nodiscard]] result<std::string> begin_checkpoint_dir(const std::string& dir);
/// Syncs every file of the completed `<dir>.tmp` and moves it to `dir`, replacing a previous
/// checkpoint there: the old one is renamed to `<dir>.old` first and removed last, so one of the
/// two is whole at every moment, also after a crash of the host.
[[nodiscard]] status commit_checkpoint_dir(const std::string& dir);

}  // namespace kforge::trainer

#pragma once
// `kforge memory-plan`: the memory plan's estimates (memory_plan.hpp, what `kforge run --check`
// prints for one manifest) side by side for several models and ways of training them, as a
// Markdown table: for each model its parameters, and for each mode the trainable parameters and
// the trainer's bytes on each rank at a given micro-batch and sequence length, plus the sampler's
// bytes at its defaults. Models are read from config.json alone: no weights are needed, so the
// shapes of a model too large to fetch can be planned from its config.

#include <cstdint>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "config/options/trainer_options.hpp"
#include "runtime/memory_plan.hpp"

namespace kforge::pipeline {

/// One way of training, as a manifest's [trainer] table would set it.
struct training_mode {
  std::string name;
  trainer_options trainer;
  /// Data-parallel ranks optimiser state is sharded over (trainer_memory's `ranks`).
  std::int64_t ranks = 1;
};

/// Full fine-tuning, with activation checkpointing, with it and sharded optimiser state over each of
/// `shard_ranks`, LoRA of rank `lora_rank` on the default projections, LoRA with checkpointing;
/// every one at micro-batch `micro_batch`.
std::vector<training_mode> standard_training_modes(std::int64_t micro_batch, std::int64_t lora_rank,
                                                   const std::vector<std::int64_t>& shard_ranks);

/// The parameters a mode trains: all of them, or the LoRA adapters'.
std::int64_t trainable_parameters(const policy_shape& p, const training_mode& m);

/// A Markdown table, one row per (model, mode), of sequences `sequence_tokens` long.
std::string memory_table(const std::vector<std::pair<std::string, policy_shape>>& models,
                         const std::vector<training_mode>& modes, std::int64_t sequence_tokens);

struct memory_table_options {
  /// Model directories or config.json files.
  std::vector<std::string> models;
  std::int64_t micro_batch = 4;
  std::int64_t sequence_tokens = 4096;
  std::int64_t lora_rank = 64;
  std::vector<std::int64_t> shard_ranks{2, 8};
};

/// Prints the table for `opt`'s models. Exit code: 0, 2 for a config that cannot be read or bad options.
int memory_table_command(const memory_table_options& opt, std::ostream& out, std::ostream& err);

}  // namespace kforge::pipeline

#include "runtime/memory_table.hpp"

#include <cstdio>
#include <filesystem>
#include <sstream>

#include "config/options/sampler_options.hpp"

namespace kforge::pipeline {
namespace {

// "7.62 B", "80.7 M": parameter counts as model cards give them.
std::string count(std::int64_t n) {
  char buf[32];
  const double x = static_cast<double>(n);
  if (x >= 1e9) std::snprintf(buf, sizeof buf, "%.2f B", x / 1e9);
  else std::snprintf(buf, sizeof buf, "%.1f M", x / 1e6);
  return buf;
}

std::string largest_part(const memory_estimate& e) {
  return e.parts.empty() ? "" : e.parts.front().first + ": " + gib(e.parts.front().second);
}

// The model's directory name, for a directory or its config.json.
std::string model_label(const std::string& path) {
  std::filesystem::path p = std::filesystem::path(path).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();  // a trailing slash
  if (p.filename() == "config.json") p = p.parent_path();
  return p.filename().empty() ? path : p.filename().string();
}

std::string row(const std::vector<std::string>& cells) {
  std::string s = "|";
  for (const auto& c : cells) s += " " + c + " |";
  return s + "\n";
}

}  // namespace

std::vector<training_mode> standard_training_modes(std::int64_t micro_batch, std::int64_t lora_rank,
                                                   const std::vector<std::int64_t>& shard_ranks) {
  trainer_options base;
  base.micro_batch = micro_batch;
  std::vector<training_mode> modes;
  modes.push_back({"full fine-tuning", base});
  auto checkpointed = base;
  checkpointed.activation_checkpointing = true;
  modes.push_back({"full + activation checkpointing", checkpointed});
  for (auto n : shard_ranks) {
    auto sharded = checkpointed;
    sharded.shard_optimizer = true;
    modes.push_back({"full + checkpointing, optimiser state sharded over " + std::to_string(n) + " ranks", sharded, n});
  }
  auto lora = base;
  lora.lora.enabled = true;
  lora.lora.rank = lora_rank;
  std::string targets;
  for (const auto& t : lora.lora.targets) targets += (targets.empty() ? "" : ", ") + t;
  modes.push_back({"LoRA r " + std::to_string(lora_rank) + " (" + targets + ")", lora});
  lora.activation_checkpointing = true;
  modes.push_back({"LoRA r " + std::to_string(lora_rank) + " + activation checkpointing", lora});
  return modes;
}

std::int64_t trainable_parameters(const policy_shape& p, const training_mode& m) {
  return m.trainer.lora.enabled ? p.lora_parameters(m.trainer.lora.rank, m.trainer.lora.targets) : p.parameters();
}

std::string memory_table(const std::vector<std::pair<std::string, policy_shape>>& models,
                         const std::vector<training_mode>& modes, std::int64_t sequence_tokens) {
  std::string s = row({"model", "parameters", "stage and mode", "trainable", "per GPU", "largest part"});
  s += row({"---", "---:", "---", "---:", "---:", "---"});
  const sampler_options sampler_defaults;
  for (const auto& [name, shape] : models) {
    const std::string params = count(shape.parameters());
    for (const auto& m : modes) {
      const auto e = trainer_memory(shape, m.trainer, sequence_tokens, m.ranks);
      s += row({name, params, "trainer: " + m.name, count(trainable_parameters(shape, m)), gib(e.total()),
                largest_part(e)});
    }
    const auto e = sampler_memory(shape, sampler_defaults, sequence_tokens);
    s += row({name, params,
              "sampler: " + std::to_string(sampler_defaults.batch_requests * sampler_defaults.group_size) +
                  " sequences (batch_requests x group_size defaults)",
              "", gib(e.total()), largest_part(e)});
  }
  return s;
}

int memory_table_command(const memory_table_options& opt, std::ostream& out, std::ostream& err) {
  if (opt.models.empty() || opt.micro_batch < 1 || opt.sequence_tokens < 1 || opt.lora_rank < 1) {
    err << "kforge memory-plan: needs a model, and micro-batch, tokens and LoRA rank >= 1\n";
    return 2;
  }
  for (auto n : opt.shard_ranks)
    if (n < 2) {
      err << "kforge memory-plan: --shard-ranks: each >= 2 (one rank has nothing to share with)\n";
      return 2;
    }
  std::vector<std::pair<std::string, policy_shape>> models;
  for (const auto& path : opt.models) {
    auto shape = policy_shape_of(path);
    if (!shape) {
      err << "kforge memory-plan: " << shape.message() << "\n";
      return 2;
    }
    models.emplace_back(model_label(path), *shape);
  }
  out << "The memory plan's estimates (runtime/memory_plan.hpp) at a micro-batch of " << opt.micro_batch << " x "
      << opt.sequence_tokens << " tokens: bf16 compute, fp32 optimiser state; trainer bytes per rank.\n\n"
      << memory_table(models, standard_training_modes(opt.micro_batch, opt.lora_rank, opt.shard_ranks),
                      opt.sequence_tokens);
  return 0;
}

}  // namespace kforge::pipeline

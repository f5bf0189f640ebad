#pragma once
// The flags of `kforge model` (model_command.hpp), for commands/cli.cpp (header-only: only the
// kforge executable, which links CLI11, includes it), as tokenizer_cli.hpp does for
// `kforge tokenizer`.

#include <CLI/CLI.hpp>

#include <ostream>

#include "model/model_command.hpp"

namespace kforge::model {

struct model_subcommand_options {
  logits_options logits;
  random_adapter_options adapter;
};

/// Adds `model` with its `logits` and `random-adapter` subcommands to `app`, filling `opt`.
inline CLI::App* add_model_subcommand(CLI::App& app, model_subcommand_options& opt) {
  auto* cmd = app.add_subcommand("model", "Check the policy model against other implementations of it");
  cmd->require_subcommand(1);
  auto* logits = cmd->add_subcommand(
      "logits", "Write the logits of a checkpoint (with a LoRA adapter if given) for token ids to a "
                "safetensors file: \"logits\" [T, V] fp32 and \"tokens\" [T]");
  logits->add_option("--model", opt.logits.model, "Checkpoint directory")->required()->check(CLI::ExistingDirectory);
  logits->add_option("--adapter", opt.logits.adapter, "PEFT LoRA adapter directory (adapter_config.json, "
                                                      "adapter_model.safetensors)")
      ->check(CLI::ExistingDirectory);
  logits->add_option("--tokens", opt.logits.tokens, "Token ids, comma-separated")->required()->delimiter(',');
  logits->add_option("--dtype", opt.logits.dtype, "float32 (default), bfloat16 or float16");
  logits->add_option("--device", opt.logits.device, "cpu (default), cuda or cuda:N");
  logits->add_option("--out,-o", opt.logits.out, "Output .safetensors file")->required();

  auto* adapter = cmd->add_subcommand(
      "random-adapter", "Write a LoRA adapter in the PEFT layout for a checkpoint's shapes, as the trainer "
                        "writes one, with B drawn at random (a fresh adapter's B is zero)");
  adapter->add_option("--model", opt.adapter.model, "Checkpoint directory (its config.json)")
      ->required()
      ->check(CLI::ExistingDirectory);
  adapter->add_option("--out,-o", opt.adapter.out, "Adapter directory to write")->required();
  adapter->add_option("--rank", opt.adapter.rank, "Rank r (default 8)");
  adapter->add_option("--alpha", opt.adapter.alpha, "lora_alpha: the scale is alpha / r (default 16)");
  adapter->add_option("--targets", opt.adapter.targets, "Projections, comma-separated (default: all seven)")
      ->delimiter(',');
  adapter->add_option("--seed", opt.adapter.seed, "Seed of A and B (default 0)");
  adapter->add_option("--b-std", opt.adapter.b_std, "Standard deviation of B's entries (default 0.02)");
  return cmd;
}

/// Runs the parsed `model` subcommand.
inline int run_model_subcommand(const CLI::App& cmd, const model_subcommand_options& opt, std::ostream& out,
                                std::ostream& err) {
  if (cmd.got_subcommand("logits")) return logits_command(opt.logits, out, err);
  return random_adapter_command(opt.adapter, out, err);
}

}  // namespace kforge::model

#pragma once
// The flags of `kforge pretrain`, for commands/cli.cpp (header-only: only the kforge executable,
// which links CLI11, includes it). Kept beside the command so that flags and options change
// together; every flag fills a pretrain_options field documented in pretrain.hpp.

#include <CLI/CLI.hpp>

#include <string>
#include <type_traits>

#include "trainer/pretrain.hpp"

namespace kforge::trainer {

/// Adds `pretrain` to `app`, filling `o`. After parsing, set o.command (pretrain_command_line) and
/// call pretrain_command when the returned subcommand was given.
inline CLI::App* add_pretrain_subcommand(CLI::App& app, pretrain_options& o) {
  auto* cmd = app.add_subcommand(
      "pretrain", "Train a small Qwen2-shaped policy from scratch on prompt/completion pairs (SFT) "
                  "and write a checkpoint directory the engine sampler loads");
  cmd->add_option("--data", o.data,
                  "JSON-lines file of {\"prompt\", \"completion\"} records, or multi-turn {\"prompt\", \"turns\"} "
                  "ones (trainer/pretrain.hpp)");
  cmd->add_option("--tokenizer", o.tokenizer_dir, "Directory with tokenizer.json and tokenizer_config.json");
  cmd->add_option("--out,-o", o.out, "Checkpoint directory to write (must not exist)");
  cmd->add_flag("--overwrite", o.overwrite, "Replace --out once the new checkpoint is complete");
  cmd->add_option("--seed", o.seed, "Seed of init, split and shuffling (default 0)");
  cmd->add_option("--steps", o.steps, "Optimiser steps (0: --epochs decides)");
  cmd->add_option("--epochs", o.epochs, "Passes over the training split when --steps is 0 (default 1)");
  cmd->add_option("--batch", o.batch_size, "Sequences per step (default 16)");
  cmd->add_option("--batch-tokens", o.batch_tokens,
                  "Token budget per step, padding included; overrides --batch (default 0: off)");
  cmd->add_option("--micro-batch-tokens", o.micro_batch_tokens,
                  "Token budget per forward/backward pass; gradients accumulate (default 0: whole batch)");
  cmd->add_option("--lr", o.lr, "Peak learning rate (default 1e-3)");
  cmd->add_option("--min-lr-ratio", o.min_lr_ratio, "Cosine decay floor as a share of --lr (default 0.1)");
  cmd->add_option("--warmup", o.warmup_fraction, "Share of the steps in linear warmup (default 0.05)");
  cmd->add_option("--weight-decay", o.weight_decay, "AdamW weight decay on matrices (default 0.1)");
  cmd->add_option("--grad-clip", o.max_grad_norm, "Global grad-norm clip (default 1.0; <= 0: off)");
  cmd->add_option("--lead-tokens", o.lead_tokens,
                  "The first N completion tokens weigh --lead-weight in the training loss (default 0: off)");
  cmd->add_option("--lead-weight", o.lead_weight, "Weight of those tokens (default 1)");
  cmd->add_option("--focus-from", o.focus_from,
                  "Completion spans from this text to the end of the next --focus-to weigh --focus-weight");
  cmd->add_option("--focus-to", o.focus_to, "The text that ends a focus span (with --focus-from)");
  cmd->add_option("--focus-weight", o.focus_weight, "Weight of focus-span tokens (default 1)");
  cmd->add_option("--max-len", o.max_len, "Longest example in tokens; longer ones are dropped (default 2048)");
  cmd->add_option("--max-completion-tokens", o.max_completion_tokens,
                  "Longest completion in tokens (end of turn included); longer ones are dropped (default 0: no limit)");
  // The model's shape: each flag is also noted, since --init takes the shape from its checkpoint.
  auto shape = [&](const char* flag, auto& field, const char* help) {
    using T = std::decay_t<decltype(field)>;
    cmd->add_option_function<T>(
        flag, [&o, &field, flag](const T& v) { field = v; o.shape_flags.emplace_back(flag); }, help);
  };
  shape("--hidden", o.hidden_size, "Hidden size (default 384)");
  shape("--layers", o.num_layers, "Decoder layers (default 8)");
  shape("--heads", o.num_heads, "Attention heads (default 6)");
  shape("--kv-heads", o.num_kv_heads, "Key/value heads (default 2)");
  shape("--intermediate", o.intermediate_size, "MLP intermediate size (default 1024)");
  shape("--max-positions", o.max_positions, "max_position_embeddings (default 4096)");
  shape("--rope-theta", o.rope_theta, "Rotary base (default 10000)");
  cmd->add_flag("--untied", [&o](std::int64_t n) { o.tie_embeddings = n == 0; o.shape_flags.emplace_back("--untied"); },
                "Separate lm_head instead of the tied embedding");
  cmd->add_option("--init", o.init_from,
                  "Start from this pretrain checkpoint's weights and shape instead of a random init "
                  "(same tokenizer; the optimiser and schedule start afresh)");
  cmd->add_option("--val-fraction", o.val_fraction, "Share of examples held out for validation (default 0.02)");
  cmd->add_option("--log-every", o.log_every, "Steps between log lines (default 10)");
  cmd->add_option("--eval-every", o.eval_every, "Steps between validation losses (default 100; 0: at the end)");
  cmd->add_option("--device", o.device, "auto, cpu, cuda or cuda:N (default auto)");
  cmd->add_flag("--fp32", [&o](std::int64_t n) { o.bf16 = n == 0; }, "On CUDA, compute in fp32 instead of bf16");
  cmd->add_flag("--save-fp32", [&o](std::int64_t n) { o.save_bf16 = n == 0; },
                "Write fp32 weights instead of bf16");
  return cmd;
}

/// argv as one line, for pretrain.json.
inline std::string pretrain_command_line(int argc, char** argv) {
  std::string line;
  for (int i = 0; i < argc; ++i) {
    if (i) line += ' ';
    const std::string a = argv[i];
    const bool quote = a.empty() || a.find_first_of(" \t\"'$\\") != std::string::npos;
    line += quote ? "'" + a + "'" : a;
  }
  return line;
}

}  // namespace kforge::trainer

#pragma once
// The flags of `kforge tokenizer`, for commands/cli.cpp (header-only: only the kforge executable,
// which links CLI11, includes it), as tasks/tasks_cli.hpp does for `kforge tasks`.

#include <CLI/CLI.hpp>

#include <ostream>

#include "model/tokenizer_command.hpp"

namespace kforge::model {

/// Adds `tokenizer` and its `train` subcommand to `app`, filling `opt`.
inline CLI::App* add_tokenizer_subcommand(CLI::App& app, tokenizer_train_options& opt) {
  auto* cmd = app.add_subcommand("tokenizer", "Byte-level BPE tokenizer of our own");
  cmd->require_subcommand(1);
  auto* train = cmd->add_subcommand(
      "train", "Train a byte-level BPE tokenizer (Qwen2 pre-tokenizer, ChatML specials) on JSON Lines "
               "texts and write DIR/tokenizer.json and DIR/tokenizer_config.json");
  train->add_option("--input,-i", opt.inputs, "JSON Lines file (repeatable)")->required();
  train->add_option("--field,-f", opt.fields,
                    "Fields of each record, each a separate training text (default prompt,completion)")
      ->delimiter(',');
  train->add_option("--vocab", opt.vocab_size,
                    "Whole vocabulary: 256 bytes + merges + 3 special tokens (default 8192)");
  train->add_option("--min-frequency", opt.min_frequency,
                    "Never merge a pair seen fewer times (default 2; the vocabulary may stay smaller)");
  train->add_option("--out,-o", opt.out, "Output directory")->required();
  return cmd;
}

/// Runs the parsed `tokenizer` subcommand.
inline int run_tokenizer_subcommand(const tokenizer_train_options& opt, std::ostream& out, std::ostream& err) {
  return tokenizer_train_command(opt, out, err);
}

}  // namespace kforge::model

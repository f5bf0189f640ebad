#pragma once
// `kforge tokenizer train`: a byte-level BPE tokenizer (bpe_trainer) trained on the texts of JSON
// Lines files, written as a checkpoint's tokenizer.json + tokenizer_config.json and read back with
// the project's own loader before the command says it succeeded. Torch-free; the flags live in
// tokenizer_cli.hpp.

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "common/result.hpp"
#include "model/bpe_trainer.hpp"

namespace kforge::model {

struct tokenizer_train_options {
  /// JSON Lines files; every record must hold every field of `fields` as a string.
  std::vector<std::string> inputs;
  /// Each record's fields are separate training texts (a prompt and its kernel are not one text).
  std::vector<std::string> fields = {"prompt", "completion"};
  /// Whole vocabulary, special tokens included (see bpe_trainer_options).
  std::int64_t vocab_size = 8192;
  std::int64_t min_frequency = 2;
  /// Directory for tokenizer.json and tokenizer_config.json.
  std::string out;
};

/// Feeds the named string fields of every record of `file` to `trainer`; blank lines are skipped.
/// A line that is not a JSON object, or lacks a field, or has a non-string one, is an error naming
/// FILE:LINE and the field.
[[nodiscard]] status add_jsonl_texts(const std::string& file, const std::vector<std::string>& fields,
                                     bpe_trainer& trainer);

/// Trains, writes, reads back; prints vocab size, merges, bytes per token and time to `out`.
/// Exit code: 0, 2 for bad input or options (nothing written), 1 when writing or reading back fails.
int tokenizer_train_command(const tokenizer_train_options& opt, std::ostream& out, std::ostream& err);

}  // namespace kforge::model

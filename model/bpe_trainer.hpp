#pragma once
// Training a byte-level BPE tokenizer (GPT-2 / Qwen2 style) on our own text, and writing it as a
// checkpoint's tokenizer.json + tokenizer_config.json that model/tokenizer loads.
//
// Pre-tokenization is Qwen2's (the Split regex, then ByteLevel without a prefix space) and there is
// no normalizer, so decode(encode(s)) == s for any valid UTF-8 s. The special tokens are split off
// first, as the loader does with added tokens, and never take part in a merge.
//
// The algorithm is the usual one (as tokenizers' BpeTrainer): unique pre-tokens ("words") with
// their counts, pair counts kept up to date incrementally as each merge rewrites only the words
// that hold its pair, and a max-heap of pairs with lazily refreshed counts. Ties are broken by the
// smaller (left id, right id), byte ids in GPT-2's alphabet order, so a run is a function of the
// multiset of texts alone. Torch-free.

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/result.hpp"

namespace kforge::model {

struct bpe_trainer_options {
  /// The whole vocabulary: 256 byte tokens, the learned merges and the special tokens. Training
  /// stops earlier when no pair is seen min_frequency times.
  std::int64_t vocab_size = 8192;
  /// Pairs seen fewer times than this (over the whole input) are never merged: a pair seen once is
  /// a memorised string, not a unit of the language.
  std::int64_t min_frequency = 2;
  /// Added tokens with ids after the BPE vocabulary, in this order. ChatML's, so that a checkpoint
  /// with this tokenizer is recognised as ChatML by model/chat.
  std::vector<std::string> special_tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
};

/// A trained tokenizer: ids 0..255 the bytes (in GPT-2's alphabet order, as Qwen2's vocabulary
/// starts), then one id per new merged token, then the special tokens.
struct bpe_model {
  /// Each BPE token's raw bytes, by id.
  std::vector<std::string> tokens;
  /// The merges by rank, as (left id, right id); a merge whose bytes equal an earlier token's
  /// reuses that id (as tokenizers does), so merges may outnumber new tokens.
  std::vector<std::pair<std::int32_t, std::int32_t>> merges;
  std::vector<std::string> special_tokens;

  /// BPE tokens and special tokens.
  std::int64_t vocab_size() const { return static_cast<std::int64_t>(tokens.size() + special_tokens.size()); }
  /// Id of the i-th special token.
  std::int64_t special_id(std::size_t i) const { return static_cast<std::int64_t>(tokens.size() + i); }
};

/// What training saw and what it achieved on that input.
struct bpe_stats {
  std::int64_t texts = 0;
  std::int64_t bytes = 0;          ///< of the texts as given (after UTF-8 repair)
  std::int64_t pre_tokens = 0;     ///< pieces the pre-tokenizer produced, specials included
  std::int64_t unique_words = 0;
  /// Tokens the trained tokenizer encodes the whole input into (special tokens count one each).
  std::int64_t tokens = 0;
  double bytes_per_token() const { return tokens > 0 ? static_cast<double>(bytes) / static_cast<double>(tokens) : 0; }
};

/// Collects texts (pre-tokenized and counted as they come, so the texts need not be kept), then
/// trains.
class bpe_trainer {
 public:
  /// Checks the options: vocab_size must leave room for the 256 bytes and the special tokens,
  /// specials must be distinct and non-empty.
  [[nodiscard]] static result<bpe_trainer> create(bpe_trainer_options options);

  /// One training text (UTF-8; invalid bytes are read as U+FFFD, as the tokenizer reads them).
  void add_text(std::string_view text);

  /// Learns merges up to options.vocab_size. `stats`, when given, is filled in.
  bpe_model train(bpe_stats* stats = nullptr) const;

  const bpe_trainer_options& options() const noexcept { return options_; }

 private:
  struct state;
  explicit bpe_trainer(bpe_trainer_options options);

  bpe_trainer_options options_;
  std::unordered_map<std::string, std::int64_t> words_;  // pre-token bytes -> count
  std::int64_t texts_ = 0, bytes_ = 0, pre_tokens_ = 0, special_count_ = 0;
};

/// tokenizer.json in Hugging Face's format: model BPE (vocab, merges), no normalizer, Qwen2's
/// Split + ByteLevel pre-tokenizer, ByteLevel post-processor and decoder, the specials as added
/// tokens.
std::string tokenizer_json(const bpe_model& model);

/// tokenizer_config.json: a ChatML chat template without a default system message, eos
/// "<|im_end|>", pad "<|endoftext|>", no bos (what load_generation_defaults reads), and the
/// added-tokens table transformers expects. The specials must include the ChatML ones.
std::string tokenizer_config_json(const bpe_model& model);

/// Writes both files into `dir` (created when missing), each atomically.
[[nodiscard]] status write_tokenizer_files(const bpe_model& model, const std::string& dir);

}  // namespace kforge::model

#pragma once
// Byte-level BPE as described by a Hugging Face `tokenizer.json`, encoding and decoding as the
// `tokenizers` library does (no LibTorch):
//   added tokens split off first (leftmost-longest, honouring lstrip/rstrip/single_word; those
//   not marked "normalized" before normalisation, the others after); the normalizer (none or NFC,
//   with tables generated from Python's unicodedata by gen_nfc_tables.py); the pre-tokenizer (Split
//   on a regex with behaviour Isolated or Removed, compiled with PCRE2 in UTF + UCP mode, then
//   ByteLevel; or ByteLevel with its GPT-2 regex); BPE merges by rank (ignore_merges honoured);
//   the post-processor (ByteLevel: nothing to do on ids; TemplateProcessing: its single-sequence
//   template); decoding through the ByteLevel decoder, invalid UTF-8 replaced by U+FFFD as Rust's
//   from_utf8_lossy does.
// Anything else in the file (WordPiece, byte_fallback, other normalizers or pre-tokenizers) is an
// error naming the field rather than a tokenizer that silently differs. Input that is not valid
// UTF-8 is first made valid the same lossy way (Hugging Face only ever sees valid strings).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.hpp"

namespace kforge::model {

class tokenizer {
 public:
  /// Reads `path`: a tokenizer.json or a directory holding one.
  [[nodiscard]] static result<tokenizer> load(const std::string& path);
  /// Parses tokenizer.json text; `source` prefixes errors.
  [[nodiscard]] static result<tokenizer> parse(std::string_view json_text, const std::string& source);

  /// Token ids of `text` (UTF-8). With add_special_tokens the post-processor's template applies.
  std::vector<std::int64_t> encode(std::string_view text, bool add_special_tokens = true) const;
  /// The tokens' strings as tokenizers' Encoding::tokens has them (byte-level characters; an added
  /// token as the text it matched), for debugging.
  std::vector<std::string> encode_tokens(std::string_view text, bool add_special_tokens = true) const;
  /// Text of `ids`; ids the tokenizer does not know are skipped (as Hugging Face does).
  std::string decode(const std::vector<std::int64_t>& ids, bool skip_special_tokens = false) const;

  std::optional<std::int64_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(std::int64_t id) const;
  /// One past the largest id (vocabulary and added tokens).
  std::int64_t vocab_size() const;
  /// True for added tokens marked special (<|im_end|>, ...).
  bool is_special(std::int64_t id) const;

  struct impl;

 private:
  std::shared_ptr<const impl> impl_;  // immutable once built: copies share it, and so may threads
};

/// A checkpoint's special tokens and chat format, from generation_config.json (eos_token_id,
/// bos_token_id, pad_token_id: an id or a list) and tokenizer_config.json (eos_token, pad_token,
/// bos_token: a string or {"content": ...}, resolved with the tokenizer; chat_template).
/// Unicode normalization form C of valid UTF-8 (what the NFC normalizer does); exposed for tests.
std::string nfc(const std::string& text);

struct generation_defaults {
  /// Every eos id of generation_config.json, then tokenizer_config.json's eos_token if not among them.
  std::vector<std::int64_t> stop_tokens;
  std::optional<std::int64_t> pad_token;
  std::optional<std::int64_t> bos_token;
  /// The Jinja chat template as written (rendering it is the prompt builder's business).
  std::string chat_template;
};

/// Reads `model_dir`/generation_config.json and `tokenizer_dir`/tokenizer_config.json (the same
/// directory when tokenizer_dir is empty). An absent file contributes nothing; a malformed one, or a
/// token string the tokenizer does not know, is an error naming the file and field.
[[nodiscard]] result<generation_defaults> load_generation_defaults(const std::string& model_dir, const tokenizer& tok,
                                                                   const std::string& tokenizer_dir = "");

}  // namespace kforge::model

#pragma once
// The pieces of byte-level BPE (GPT-2, Qwen2) that both sides of a tokenizer.json need: the
// loader (tokenizer.cpp) and the trainer that writes one (bpe_trainer.cpp). Kept in one place so
// that what the trainer learns on is byte for byte what the loader will encode: the same UTF-8
// repair, the same byte-to-unicode alphabet, the same PCRE2 flags for the split regex.
// Internal to kforge::model (PCRE2 stays out of this header).

#include <array>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/result.hpp"

namespace kforge::model::byte_level {

void append_utf8(std::string& out, char32_t cp);

/// Valid UTF-8 of `bytes`, each maximal invalid subpart replaced by U+FFFD: Rust's
/// String::from_utf8_lossy, which Hugging Face's decoders end with (and PCRE2 in UTF mode needs).
std::string utf8_lossy(std::string_view bytes);

/// Decodes one code point at s[i] of valid UTF-8, advancing i.
char32_t next_cp(std::string_view s, std::size_t& i);

/// GPT-2's bytes_to_unicode: every byte as a printable character, so that a token is a string.
struct alphabet_table {
  std::array<std::string, 256> to_char;  ///< UTF-8 of the character standing for each byte
  std::unordered_map<char32_t, unsigned char> to_byte;
};
const alphabet_table& alphabet();

/// `bytes` written in the byte-level alphabet (what a vocabulary entry looks like).
std::string to_alphabet(std::string_view bytes);

/// A PCRE2 pattern compiled in UTF + UCP mode (JIT when available), as tokenizers' onig/fancy-regex
/// patterns behave on \p{L}, \s and friends.
class regex {
 public:
  /// `where` prefixes the error when the pattern does not compile.
  [[nodiscard]] static result<regex> compile(const std::string& pattern, bool literal, const std::string& where);
  /// Non-overlapping matches [begin, end) over valid UTF-8 `s`; empty matches are skipped.
  std::vector<std::pair<std::size_t, std::size_t>> find_all(std::string_view s) const;

 private:
  struct compiled;
  std::shared_ptr<compiled> code_;  // immutable once compiled: copies share it, and so may threads
};

/// The ByteLevel pre-tokenizer's own regex (use_regex: true).
extern const char* const kGpt2Pattern;
/// Qwen2's Split regex (tokenizer.json pre_tokenizer[0]): single digits, letters with one leading
/// non-letter, punctuation runs keeping their line breaks.
extern const char* const kQwen2Pattern;

}  // namespace kforge::model::byte_level

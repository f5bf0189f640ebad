#include "model/byte_level.hpp"

#include <cstdint>

#include <pcre2.h>

namespace kforge::model::byte_level {

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  const std::size_t n = bytes.size();
  std::size_t i = 0;
  auto cont = [&](std::size_t k, unsigned lo, unsigned hi) { return k < n && s[k] >= lo && s[k] <= hi; };
  while (i < n) {
    const unsigned b = s[i];
    std::size_t len = 0;
    if (b < 0x80) {
      out += static_cast<char>(b);
      ++i;
      continue;
    }
    unsigned lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) {
      len = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
      len = 3;
      if (b == 0xE0) lo = 0xA0;
      if (b == 0xED) hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
      len = 4;
      if (b == 0xF0) lo = 0x90;
      if (b == 0xF4) hi = 0x8F;
    }
    if (len == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    std::size_t k = i + 1;
    bool ok = cont(k, lo, hi);
    if (ok) {
      ++k;
      while (k < i + len && cont(k, 0x80, 0xBF)) ++k;
      ok = k == i + len;
    }
    if (ok) {
      out.append(bytes.substr(i, len));
    } else {
      out += "\xEF\xBF\xBD";
    }
    i = k;
  }
  return out;
}

char32_t next_cp(std::string_view s, std::size_t& i) {
  const auto b = static_cast<unsigned char>(s[i]);
  int len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
  char32_t cp = len == 1 ? b : len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
  for (int k = 1; k < len && i + k < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += static_cast<std::size_t>(len);
  return cp;
}

const alphabet_table& alphabet() {
  static const alphabet_table a = [] {
    alphabet_table t;
    std::array<bool, 256> direct{};
    for (int b = '!'; b <= '~'; ++b) direct[b] = true;
    for (int b = 0xA1; b <= 0xAC; ++b) direct[b] = true;
    for (int b = 0xAE; b <= 0xFF; ++b) direct[b] = true;
    char32_t extra = 256;
    for (int b = 0; b < 256; ++b) {
      const char32_t cp = direct[b] ? static_cast<char32_t>(b) : extra++;
      append_utf8(t.to_char[b], cp);
      t.to_byte[cp] = static_cast<unsigned char>(b);
    }
    return t;
  }();
  return a;
}

std::string to_alphabet(std::string_view bytes) {
  const alphabet_table& a = alphabet();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) out += a.to_char[b];
  return out;
}

struct regex::compiled {
  std::unique_ptr<pcre2_code, decltype(&pcre2_code_free)> code{nullptr, pcre2_code_free};
};

result<regex> regex::compile(const std::string& pattern, bool literal, const std::string& where) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  const std::uint32_t flags = PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0u);
  pcre2_code* c =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), flags, &err, &offset, nullptr);
  if (c == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    return error{where + ": regex does not compile at offset " + std::to_string(offset) + ": " +
                 reinterpret_cast<const char*>(msg)};
  }
  pcre2_jit_compile(c, PCRE2_JIT_COMPLETE);  // optional: falls back to the interpreter
  regex r;
  r.code_ = std::make_shared<compiled>();
  r.code_->code.reset(c);
  return r;
}

std::vector<std::pair<std::size_t, std::size_t>> regex::find_all(std::string_view s) const {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  if (!code_) return out;
  pcre2_code* code = code_->code.get();
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
      pcre2_match_data_create_from_pattern(code, nullptr), pcre2_match_data_free);
  std::size_t at = 0;
  while (at <= s.size()) {
    const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), at,
                               at == 0 ? 0 : PCRE2_NO_UTF_CHECK, md.get(), nullptr);
    if (rc < 0) break;  // no match (the input is valid UTF-8, so no other error is expected)
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    std::size_t b = ov[0], e = ov[1];
    if (e == b) {  // an empty match: step over one character
      if (b >= s.size()) break;
      std::size_t k = b;
      next_cp(s, k);
      at = k;
      continue;
    }
    out.emplace_back(b, e);
    at = e;
  }
  return out;
}

const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

const char* const kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

}  // namespace kforge::model::byte_level

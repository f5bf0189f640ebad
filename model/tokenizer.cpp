#include "model/tokenizer.hpp"

#include "common/text_file.hpp"
#include "model/byte_level.hpp"
#include "model/json_object.hpp"

#include <algorithm>
#include <iterator>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

namespace kforge::model {
namespace {

using json = nlohmann::json;

using byte_level::alphabet;
using byte_level::append_utf8;
using byte_level::kGpt2Pattern;
using byte_level::next_cp;
using byte_level::regex;
using byte_level::utf8_lossy;

// Rust's char::is_whitespace (Unicode White_Space).
bool is_whitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// ---- NFC (Unicode normalization form C) -------------------------------------------------------

#include "model/nfc_tables.inc"

constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

unsigned ccc_of(char32_t cp) {
  if (cp < 0x300) return 0;
  const auto* b = std::begin(kCcc);
  const auto* e = std::end(kCcc);
  const auto* it = std::lower_bound(b, e, cp, [](const auto& row, char32_t v) { return row[0] < v; });
  return it != e && (*it)[0] == cp ? (*it)[1] : 0;
}

void decompose(char32_t cp, std::u32string& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t s = cp - kSBase;
    out += kLBase + s / kNCount;
    out += kVBase + (s % kNCount) / kTCount;
    if (s % kTCount != 0) out += kTBase + s % kTCount;
    return;
  }
  const auto* b = std::begin(kDecomp);
  const auto* e = std::end(kDecomp);
  const auto* it = std::lower_bound(b, e, cp, [](const auto& row, char32_t v) { return row[0] < v; });
  if (it != e && (*it)[0] == cp) {
    for (std::uint32_t k = 0; k < (*it)[2]; ++k) out += static_cast<char32_t>(kDecompPool[(*it)[1] + k]);
  } else {
    out += cp;
  }
}

// The primary composite of (a, b), or 0.
char32_t compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount)
    return a + (b - kTBase);
  const auto* first = std::begin(kCompose);
  const auto* last = std::end(kCompose);
  const auto* it = std::lower_bound(first, last, std::make_pair(a, b), [](const auto& row, const auto& key) {
    return row[0] < key.first || (row[0] == key.first && row[1] < key.second);
  });
  return it != last && (*it)[0] == a && (*it)[1] == b ? static_cast<char32_t>((*it)[2]) : 0;
}

// NFC of valid UTF-8: canonical decomposition, canonical ordering, canonical composition (UAX #15).
std::string nfc_impl(const std::string& text) {
  // Below U+0300 (lead bytes under 0xCC) every character is already NFC and a starter.
  if (std::none_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) >= 0xCC; }))
    return text;
  std::u32string d;
  for (std::size_t i = 0; i < text.size();) decompose(next_cp(text, i), d);
  // Canonical ordering: a stable sort of each run of non-starters by combining class.
  for (std::size_t i = 0; i < d.size();) {
    if (ccc_of(d[i]) == 0) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < d.size() && ccc_of(d[j]) != 0) ++j;
    std::stable_sort(d.begin() + static_cast<std::ptrdiff_t>(i), d.begin() + static_cast<std::ptrdiff_t>(j),
                     [](char32_t x, char32_t y) { return ccc_of(x) < ccc_of(y); });
    i = j;
  }
  // Composition, as the UAX #15 sample code.
  if (!d.empty()) {
    std::size_t starter = 0, out = 1;
    unsigned last_class = ccc_of(d[0]) == 0 ? 0 : 256;
    for (std::size_t i = 1; i < d.size(); ++i) {
      const char32_t ch = d[i];
      const unsigned cls = ccc_of(ch);
      const char32_t composite = compose(d[starter], ch);
      if (composite != 0 && (last_class < cls || last_class == 0)) {
        d[starter] = composite;
        continue;
      }
      if (cls == 0) starter = out;
      last_class = cls;
      d[out++] = ch;
    }
    d.resize(out);
  }
  std::string result;
  result.reserve(text.size());
  for (char32_t cp : d) append_utf8(result, cp);
  return result;
}

// One pre-tokenizer step, applied to every piece.
struct pre_step {
  enum class kind { split, byte_level } type = kind::split;
  regex re;                    // split: the pattern; byte_level with use_regex: GPT-2's
  bool removed = false;        // split behaviour Removed (else Isolated)
  bool add_prefix_space = false;
  bool use_regex = false;
};

struct added_token {
  std::int64_t id = 0;
  std::string content;
  bool single_word = false, lstrip = false, rstrip = false, normalized = false, special = false;
};

result<bool> get_bool(const json& j, const char* key, bool fallback, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_boolean()) return error{where + "." + key + ": must be true or false"};
  return j[key].get<bool>();
}

}  // namespace

struct tokenizer::impl {
  std::unordered_map<std::string, std::int64_t> vocab;
  std::unordered_map<std::int64_t, std::string> id_to_token;
  std::unordered_map<std::uint64_t, std::pair<std::int64_t, std::int64_t>> merges;  // (a, b) -> (rank, merged id)
  bool ignore_merges = false;
  std::optional<std::int64_t> unk;
  std::vector<added_token> added;
  std::unordered_map<std::int64_t, std::size_t> added_by_id;
  std::vector<pre_step> pre;
  std::vector<std::int64_t> template_prefix, template_suffix;
  bool byte_level_decoder = true;
  bool nfc = false;  // normalizer NFC
  regex word_char;  // \w, for single_word added tokens
  std::int64_t max_id = -1;

  static std::uint64_t pair_key(std::int64_t a, std::int64_t b) {
    return (static_cast<std::uint64_t>(a) << 32) | static_cast<std::uint64_t>(b);
  }

  // Splits `text` on the added tokens of one kind (normalized or not): leftmost-longest matches,
  // as tokenizers' AddedVocabulary::find_matches. Pieces with id >= 0 are added tokens.
  void split_added(std::string_view text, bool normalized, std::vector<std::pair<std::string, std::int64_t>>& out) const {
    std::size_t start_offset = 0, pos = 0;
    while (pos < text.size()) {
      const added_token* best = nullptr;
      std::size_t best_at = text.size();
      for (const auto& t : added) {
        if (t.normalized != normalized || t.content.empty()) continue;
        const std::size_t at = text.find(t.content, pos);
        if (at == std::string_view::npos) continue;
        if (at < best_at || (at == best_at && t.content.size() > best->content.size())) {
          best = &t;
          best_at = at;
        }
      }
      if (best == nullptr) break;
      std::size_t start = best_at, stop = best_at + best->content.size();
      if (best->single_word && !word_boundary_ok(text, start, stop)) {
        pos = best_at + 1;
        continue;
      }
      if (best->lstrip) {
        std::size_t k = start;
        while (k > start_offset) {
          std::size_t b = k - 1;
          while (b > 0 && (static_cast<unsigned char>(text[b]) & 0xC0) == 0x80) --b;
          std::size_t tmp = b;
          if (!is_whitespace(next_cp(text, tmp))) break;
          k = b;
        }
        start = k;
      }
      if (best->rstrip) {
        while (stop < text.size()) {
          std::size_t tmp = stop;
          if (!is_whitespace(next_cp(text, tmp))) break;
          stop = tmp;
        }
      }
      if (start_offset < start) out.emplace_back(std::string(text.substr(start_offset, start - start_offset)), -1);
      out.emplace_back(std::string(text.substr(start, stop - start)), best->id);  // with what it stripped
      start_offset = stop;
      pos = stop;
    }
    if (start_offset < text.size()) out.emplace_back(std::string(text.substr(start_offset)), -1);
  }

  bool word_boundary_ok(std::string_view text, std::size_t start, std::size_t stop) const {
    auto is_word = [&](std::string_view ch) { return !word_char.find_all(ch).empty(); };
    if (start > 0) {
      std::size_t b = start - 1;
      while (b > 0 && (static_cast<unsigned char>(text[b]) & 0xC0) == 0x80) --b;
      if (is_word(text.substr(b, start - b))) return false;
    }
    if (stop < text.size()) {
      std::size_t k = stop;
      next_cp(text, k);
      if (is_word(text.substr(stop, k - stop))) return false;
    }
    return true;
  }

  // Pre-tokenizes one segment into the strings BPE sees.
  std::vector<std::string> pre_tokenize(const std::string& segment) const {
    std::vector<std::string> pieces{segment};
    for (const auto& step : pre) {
      std::vector<std::string> next;
      for (auto& p : pieces) {
        if (step.type == pre_step::kind::split) {
          split_isolated(p, step.re, step.removed, next);
        } else {
          std::string s = p;
          if (step.add_prefix_space && (s.empty() || s[0] != ' ')) s.insert(s.begin(), ' ');
          std::vector<std::string> parts;
          if (step.use_regex) {
            split_isolated(s, step.re, false, parts);
          } else {
            parts.push_back(std::move(s));
          }
          for (const auto& part : parts) {
            std::string mapped;
            mapped.reserve(part.size() * 2);
            for (unsigned char b : part) mapped += alphabet().to_char[b];
            next.push_back(std::move(mapped));
          }
        }
      }
      pieces = std::move(next);
    }
    return pieces;
  }

  static void split_isolated(const std::string& s, const regex& re, bool removed, std::vector<std::string>& out) {
    std::size_t at = 0;
    for (const auto& [b, e] : re.find_all(s)) {
      if (b > at) out.push_back(s.substr(at, b - at));
      if (!removed) out.push_back(s.substr(b, e - b));
      at = e;
    }
    if (at < s.size()) out.push_back(s.substr(at));
  }

  // `tokens`, when given, receives each token's string: the vocabulary's, or for an added token the
  // text it matched (whitespace it stripped included), as tokenizers' Encoding::tokens.
  std::vector<std::int64_t> encode(std::string_view text_in, bool add_special_tokens,
                                   std::vector<std::string>* tokens) const {
    const std::string text = utf8_lossy(text_in);  // PCRE2 in UTF mode needs valid UTF-8
    std::vector<std::pair<std::string, std::int64_t>> first, pieces;
    split_added(text, /*normalized=*/false, first);
    for (auto& [s, id] : first) {
      if (id >= 0) {
        pieces.emplace_back(std::move(s), id);
      } else {
        split_added(normalize(s), /*normalized=*/true, pieces);
      }
    }
    std::vector<std::int64_t> out;
    auto add_template = [&](const std::vector<std::int64_t>& ids) {
      out.insert(out.end(), ids.begin(), ids.end());
      if (tokens != nullptr)
        for (auto id : ids) tokens->push_back(token_string(id));
    };
    if (add_special_tokens) add_template(template_prefix);
    for (const auto& [s, id] : pieces) {
      if (id >= 0) {
        out.push_back(id);
        if (tokens != nullptr) tokens->push_back(s);
        continue;
      }
      for (const auto& word : pre_tokenize(s)) {
        const std::size_t before = out.size();
        bpe(word, out);
        if (tokens != nullptr)
          for (std::size_t i = before; i < out.size(); ++i) tokens->push_back(id_to_token.at(out[i]));
      }
    }
    if (add_special_tokens) add_template(template_suffix);
    return out;
  }

  std::string token_string(std::int64_t id) const {
    if (auto a = added_by_id.find(id); a != added_by_id.end()) return added[a->second].content;
    auto v = id_to_token.find(id);
    return v == id_to_token.end() ? std::string() : v->second;
  }

  std::string normalize(const std::string& s) const { return nfc ? nfc_impl(s) : s; }

  void bpe(const std::string& word, std::vector<std::int64_t>& out) const {
    if (word.empty()) return;
    if (ignore_merges) {
      auto it = vocab.find(word);
      if (it != vocab.end()) {
        out.push_back(it->second);
        return;
      }
    }
    std::vector<std::int64_t> sym;
    for (std::size_t i = 0; i < word.size();) {
      std::size_t k = i;
      next_cp(word, k);
      auto it = vocab.find(word.substr(i, k - i));
      if (it != vocab.end()) {
        sym.push_back(it->second);
      } else if (unk) {
        sym.push_back(*unk);
      }
      i = k;
    }
    while (sym.size() > 1) {
      std::int64_t best_rank = -1, best_id = 0;
      std::size_t best_at = 0;
      for (std::size_t i = 0; i + 1 < sym.size(); ++i) {
        auto it = merges.find(pair_key(sym[i], sym[i + 1]));
        if (it != merges.end() && (best_rank < 0 || it->second.first < best_rank)) {
          best_rank = it->second.first;
          best_id = it->second.second;
          best_at = i;
        }
      }
      if (best_rank < 0) break;
      sym[best_at] = best_id;
      sym.erase(sym.begin() + static_cast<std::ptrdiff_t>(best_at) + 1);
    }
    out.insert(out.end(), sym.begin(), sym.end());
  }
};

std::string nfc(const std::string& text) { return nfc_impl(utf8_lossy(text)); }

namespace {

error field_error(const std::string& source, const std::string& field, const std::string& why) {
  return error{source + ": " + field + ": " + why};
}

/// The steps of a normalizer, pre-tokenizer or post-processor: a "Sequence"'s list under `key`,
/// or the one step itself.
std::vector<json> sequence_items(const json& p, const char* key) {
  if (p.value("type", "") == "Sequence" && p.contains(key) && p[key].is_array())
    return std::vector<json>(p[key].begin(), p[key].end());
  return {p};
}

/// model: a byte-level BPE (vocabulary, merges in either spelling, unk_token).
status parse_bpe_model(const json& j, const std::string& source, tokenizer::impl& m) {
  if (!j.contains("model") || !j["model"].is_object()) return field_error(source, "model", "missing or not an object");
  const json& model = j["model"];
  if (!model.contains("type") || model["type"] != "BPE")
    return field_error(source, "model.type", "only BPE is supported, got " + (model.contains("type") ? model["type"].dump() : "nothing"));
  if (model.contains("dropout") && !model["dropout"].is_null() && model["dropout"] != 0)
    return field_error(source, "model.dropout", "BPE dropout is not supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (model.contains(key) && !model[key].is_null() && model[key] != "")
      return field_error(source, std::string("model.") + key, "not supported");
  {
    auto bf = get_bool(model, "byte_fallback", false, source + ": model");
    if (!bf) return bf.err();
    if (bf.value()) return field_error(source, "model.byte_fallback", "not supported");
    auto im = get_bool(model, "ignore_merges", false, source + ": model");
    if (!im) return im.err();
    m.ignore_merges = im.value();
  }
  if (!model.contains("vocab") || !model["vocab"].is_object()) return field_error(source, "model.vocab", "missing or not an object");
  for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it) {
    if (!it->is_number_integer() || it->get<std::int64_t>() < 0)
      return field_error(source, "model.vocab", "'" + it.key() + "' has no non-negative integer id");
    const auto id = it->get<std::int64_t>();
    m.vocab[it.key()] = id;
    m.id_to_token[id] = it.key();
    m.max_id = std::max(m.max_id, id);
  }
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    auto it = m.vocab.find(model["unk_token"].get<std::string>());
    if (it == m.vocab.end()) return field_error(source, "model.unk_token", "not in the vocabulary");
    m.unk = it->second;
  }
  if (!model.contains("merges") || !model["merges"].is_array()) return field_error(source, "model.merges", "missing or not a list");
  std::int64_t rank = 0;
  for (const auto& e : model["merges"]) {
    std::string a, b;
    if (e.is_string()) {  // "a b" (tokenizers < 0.20)
      const std::string s = e.get<std::string>();
      const auto sp = s.find(' ');
      if (sp == std::string::npos)
        return field_error(source, "model.merges", "entry " + std::to_string(rank) + " '" + s + "' is not 'a b'");
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {  // ["a", "b"]
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    } else {
      return field_error(source, "model.merges", "entry " + std::to_string(rank) + " is neither 'a b' nor [a, b]");
    }
    auto ia = m.vocab.find(a), ib = m.vocab.find(b), iab = m.vocab.find(a + b);
    if (ia == m.vocab.end() || ib == m.vocab.end() || iab == m.vocab.end())
      return field_error(source, "model.merges",
                         "entry " + std::to_string(rank) + " ('" + a + "', '" + b +
                             "') uses a token not in the vocabulary");
    m.merges.emplace(tokenizer::impl::pair_key(ia->second, ib->second), std::make_pair(rank, iab->second));
    ++rank;
  }
  return {};
}

/// added_tokens: each with its id, content and flags.
status parse_added_tokens(const json& j, const std::string& source, tokenizer::impl& m) {
  if (!j.contains("added_tokens") || j["added_tokens"].is_null()) return {};
  if (!j["added_tokens"].is_array()) return field_error(source, "added_tokens", "not a list");
  for (const auto& t : j["added_tokens"]) {
    const std::string where = source + ": added_tokens";
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() || !t.contains("content") ||
        !t["content"].is_string())
      return field_error(source, "added_tokens", "every entry needs an integer id and a string content");
    added_token a;
    a.id = t["id"].get<std::int64_t>();
    a.content = t["content"].get<std::string>();
    for (auto [key, dst] : {std::pair{"single_word", &a.single_word}, std::pair{"lstrip", &a.lstrip},
                            std::pair{"rstrip", &a.rstrip}, std::pair{"normalized", &a.normalized},
                            std::pair{"special", &a.special}}) {
      auto v = get_bool(t, key, false, where);
      if (!v) return v.err();
      *dst = v.value();
    }
    m.added_by_id[a.id] = m.added.size();
    m.max_id = std::max(m.max_id, a.id);
    m.added.push_back(std::move(a));
  }
  return {};
}

/// normalizer: none or NFC (see the header on NFC).
status parse_normalizer(const json& j, const std::string& source, tokenizer::impl& m) {
  if (!j.contains("normalizer") || j["normalizer"].is_null()) return {};
  const json& n = j["normalizer"];
  const std::vector<json> list = sequence_items(n, "normalizers");
  for (const auto& e : list)
    if (!e.is_object() || e.value("type", "") != "NFC")
      return field_error(source, "normalizer", "only NFC is supported, got " + e.dump());
  m.nfc = !list.empty();
  return {};
}

/// The pre-tokenizer steps: Split (Isolated or Removed) and ByteLevel, which must come last.
status parse_pre_tokenizer(const json& j, const std::string& source, tokenizer::impl& m) {
  // Checked even when left out: a tokenizer without ByteLevel is not one this reads.
  const bool given = j.contains("pre_tokenizer") && !j["pre_tokenizer"].is_null();
  const std::vector<json> list = given ? sequence_items(j["pre_tokenizer"], "pretokenizers") : std::vector<json>{};
  for (std::size_t i = 0; i < list.size(); ++i) {
    const json& e = list[i];
    const std::string field = "pre_tokenizer[" + std::to_string(i) + "]";
    const std::string type = e.is_object() ? e.value("type", "") : "";
    pre_step step;
    if (type == "Split") {
      const std::string behavior = e.value("behavior", "");
      if (behavior != "Isolated" && behavior != "Removed")
        return field_error(source, field + ".behavior", "only Isolated and Removed are supported, got '" + behavior + "'");
      auto inv = get_bool(e, "invert", false, source + ": " + field);
      if (!inv) return inv.err();
      if (inv.value()) return field_error(source, field + ".invert", "not supported");
      if (!e.contains("pattern") || !e["pattern"].is_object())
        return field_error(source, field + ".pattern", "missing");
      const json& pat = e["pattern"];
      const bool literal = pat.contains("String");
      const json& text = literal ? pat["String"] : pat.contains("Regex") ? pat["Regex"] : json();
      if (!text.is_string()) return field_error(source, field + ".pattern", "needs Regex or String");
      auto re = regex::compile(text.get<std::string>(), literal, source + ": " + field + ".pattern");
      if (!re) return re.err();
      step.re = re.value();
      step.removed = behavior == "Removed";
    } else if (type == "ByteLevel") {
      step.type = pre_step::kind::byte_level;
      auto aps = get_bool(e, "add_prefix_space", false, source + ": " + field);
      auto ur = get_bool(e, "use_regex", true, source + ": " + field);
      if (!aps) return aps.err();
      if (!ur) return ur.err();
      step.add_prefix_space = aps.value();
      step.use_regex = ur.value();
      if (step.use_regex) {
        auto re = regex::compile(kGpt2Pattern, false, source + ": " + field);
        if (!re) return re.err();
        step.re = re.value();
      }
    } else {
      return field_error(source, field + ".type", "'" + type + "' is not supported (Split, ByteLevel)");
    }
    m.pre.push_back(std::move(step));
  }
  if (m.pre.empty() || m.pre.back().type != pre_step::kind::byte_level)
    return field_error(source, "pre_tokenizer", "must end with ByteLevel (byte-level BPE)");
  return {};
}

/// post_processor: ByteLevel is a no-op on ids; TemplateProcessing's single template applies.
status parse_post_processor(const json& j, const std::string& source, tokenizer::impl& m) {
  if (!j.contains("post_processor") || j["post_processor"].is_null()) return {};
  const json& p = j["post_processor"];
  const std::vector<json> list = sequence_items(p, "processors");
  for (const auto& e : list) {
    const std::string type = e.is_object() ? e.value("type", "") : "";
    if (type == "ByteLevel") continue;
    if (type != "TemplateProcessing")
      return field_error(source, "post_processor.type", "'" + type + "' is not supported (ByteLevel, TemplateProcessing)");
    if (!e.contains("single") || !e["single"].is_array()) return field_error(source, "post_processor.single", "missing");
    bool after = false;
    for (const auto& piece : e["single"]) {
      if (piece.contains("Sequence")) {
        after = true;
        continue;
      }
      if (!piece.contains("SpecialToken") || !piece["SpecialToken"].contains("id"))
        return field_error(source, "post_processor.single", "entries must be Sequence or SpecialToken");
      const std::string name = piece["SpecialToken"]["id"].get<std::string>();
      if (!e.contains("special_tokens") || !e["special_tokens"].contains(name) ||
          !e["special_tokens"][name].contains("ids"))
        return field_error(source, "post_processor.special_tokens", "'" + name + "' has no ids");
      for (const auto& id : e["special_tokens"][name]["ids"])
        (after ? m.template_suffix : m.template_prefix).push_back(id.get<std::int64_t>());
    }
  }
  return {};
}

}  // namespace

result<tokenizer> tokenizer::parse(std::string_view json_text, const std::string& source) {
  auto parsed = parse_json_object(json_text, source);
  if (!parsed) return error{parsed.err().message};
  const json j = std::move(*parsed);
  auto m = std::make_shared<impl>();
  for (auto* part : {parse_bpe_model, parse_added_tokens, parse_normalizer, parse_pre_tokenizer, parse_post_processor})
    if (auto s = part(j, source, *m); !s) return s.err();

  // decoder
  if (j.contains("decoder") && !j["decoder"].is_null()) {
    const json& d = j["decoder"];
    if (!d.is_object() || d.value("type", "") != "ByteLevel")
      return field_error(source, "decoder", "only ByteLevel is supported, got " + d.dump());
  } else {
    m->byte_level_decoder = false;
  }
  auto wc = regex::compile("^\\w", false, source + ": word regex");
  if (!wc) return wc.err();
  m->word_char = wc.value();

  tokenizer t;
  t.impl_ = std::move(m);
  return t;
}

result<tokenizer> tokenizer::load(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string file = fs::is_directory(path, ec) ? (fs::path(path) / "tokenizer.json").string() : path;
  auto text = read_text_file(file);
  if (!text) return text.err();
  return parse(*text, file);
}

std::vector<std::int64_t> tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  return impl_->encode(text, add_special_tokens, nullptr);
}

std::vector<std::string> tokenizer::encode_tokens(std::string_view text, bool add_special_tokens) const {
  std::vector<std::string> out;
  impl_->encode(text, add_special_tokens, &out);
  return out;
}

std::string tokenizer::decode(const std::vector<std::int64_t>& ids, bool skip_special_tokens) const {
  const impl& m = *impl_;
  std::string bytes;
  bool first = true;
  for (auto id : ids) {
    const std::string* tok = nullptr;
    if (auto a = m.added_by_id.find(id); a != m.added_by_id.end()) {
      const added_token& t = m.added[a->second];
      if (skip_special_tokens && t.special) continue;
      tok = &t.content;
    } else if (auto v = m.id_to_token.find(id); v != m.id_to_token.end()) {
      tok = &v->second;
    } else {
      continue;  // unknown ids are dropped, as tokenizers does
    }
    if (!m.byte_level_decoder) {
      if (!first) bytes += ' ';
      bytes += *tok;
      first = false;
      continue;
    }
    // ByteLevel decoder: map each character back to its byte; a token with a character outside
    // the alphabet (an added token such as " x") keeps its own UTF-8 bytes.
    std::string mapped;
    bool ok = true;
    for (std::size_t i = 0; i < tok->size();) {
      const char32_t cp = next_cp(*tok, i);
      auto b = alphabet().to_byte.find(cp);
      if (b == alphabet().to_byte.end()) {
        ok = false;
        break;
      }
      mapped += static_cast<char>(b->second);
    }
    bytes += ok ? mapped : *tok;
  }
  return utf8_lossy(bytes);
}

std::optional<std::int64_t> tokenizer::token_to_id(std::string_view token) const {
  for (const auto& a : impl_->added)
    if (a.content == token) return a.id;
  auto it = impl_->vocab.find(std::string(token));
  if (it == impl_->vocab.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> tokenizer::id_to_token(std::int64_t id) const {
  if (auto a = impl_->added_by_id.find(id); a != impl_->added_by_id.end()) return impl_->added[a->second].content;
  auto it = impl_->id_to_token.find(id);
  if (it == impl_->id_to_token.end()) return std::nullopt;
  return it->second;
}

std::int64_t tokenizer::vocab_size() const { return impl_->max_id + 1; }

bool tokenizer::is_special(std::int64_t id) const {
  auto a = impl_->added_by_id.find(id);
  return a != impl_->added_by_id.end() && impl_->added[a->second].special;
}

namespace {

// An absent file is nullopt; an unreadable or malformed one an error.
result<std::optional<json>> read_optional_json(const std::string& file) {
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) return std::optional<json>{};
  auto text = read_text_file(file);
  if (!text) return text.err();
  try {
    json j = json::parse(*text);
    if (!j.is_object()) return error{file + ": not a JSON object"};
    return std::optional<json>{std::move(j)};
  } catch (const json::exception& e) {
    return error{file + ": not valid JSON: " + e.what()};
  }
}

result<std::vector<std::int64_t>> ids_field(const json& j, const char* key, const std::string& file) {
  std::vector<std::int64_t> out;
  if (!j.contains(key) || j[key].is_null()) return out;
  const json& v = j[key];
  if (v.is_number_integer()) return std::vector<std::int64_t>{v.get<std::int64_t>()};
  if (!v.is_array()) return error{file + ": " + key + ": must be an integer or a list of integers"};
  for (const auto& e : v) {
    if (!e.is_number_integer()) return error{file + ": " + key + ": must be an integer or a list of integers"};
    out.push_back(e.get<std::int64_t>());
  }
  return out;
}

// tokenizer_config's "eos_token": "<|im_end|>" or {"content": "<|im_end|>", ...} or null.
result<std::optional<std::int64_t>> token_field(const json& j, const char* key, const std::string& file,
                                                const tokenizer& tok) {
  if (!j.contains(key) || j[key].is_null()) return std::optional<std::int64_t>{};
  const json& v = j[key];
  const json* content = v.is_string() ? &v : (v.is_object() && v.contains("content") ? &v["content"] : nullptr);
  if (content == nullptr || !content->is_string())
    return error{file + ": " + key + ": must be a string or an object with a content string"};
  auto id = tok.token_to_id(content->get<std::string>());
  if (!id) return error{file + ": " + key + ": '" + content->get<std::string>() + "' is not a token of the tokenizer"};
  return std::optional<std::int64_t>{*id};
}

}  // namespace

result<generation_defaults> load_generation_defaults(const std::string& model_dir, const tokenizer& tok,
                                                     const std::string& tokenizer_dir) {
  namespace fs = std::filesystem;
  generation_defaults d;
  const std::string gen_file = (fs::path(model_dir) / "generation_config.json").string();
  auto gen = read_optional_json(gen_file);
  if (!gen) return gen.err();
  if (gen.value()) {
    const json& g = *gen.value();
    auto eos = ids_field(g, "eos_token_id", gen_file);
    auto pad = ids_field(g, "pad_token_id", gen_file);
    auto bos = ids_field(g, "bos_token_id", gen_file);
    for (auto* r : {&eos, &pad, &bos})
      if (!*r) return r->err();
    d.stop_tokens = eos.value();
    if (!pad->empty()) d.pad_token = pad->front();
    if (!bos->empty()) d.bos_token = bos->front();
  }
  const std::string tok_file =
      (fs::path(tokenizer_dir.empty() ? model_dir : tokenizer_dir) / "tokenizer_config.json").string();
  auto tc = read_optional_json(tok_file);
  if (!tc) return tc.err();
  if (tc.value()) {
    const json& t = *tc.value();
    auto eos = token_field(t, "eos_token", tok_file, tok);
    auto pad = token_field(t, "pad_token", tok_file, tok);
    auto bos = token_field(t, "bos_token", tok_file, tok);
    for (auto* r : {&eos, &pad, &bos})
      if (!*r) return r->err();
    if (eos.value() && std::find(d.stop_tokens.begin(), d.stop_tokens.end(), *eos.value()) == d.stop_tokens.end())
      d.stop_tokens.push_back(*eos.value());
    if (!d.pad_token) d.pad_token = pad.value();
    if (!d.bos_token) d.bos_token = bos.value();
    if (t.contains("chat_template")) {
      if (!t["chat_template"].is_string())
        return error{tok_file + ": chat_template: only a single template string is supported"};
      d.chat_template = t["chat_template"].get<std::string>();
    }
  }
  return d;
}

}  // namespace kforge::model

#include "model/bpe_trainer.hpp"

#include <algorithm>
#include <array>
#include <filesystem>
#include <numeric>

#include <nlohmann/json.hpp>

#include "common/text_file.hpp"
#include "model/byte_level.hpp"

namespace kforge::model {
namespace {

using ojson = nlohmann::ordered_json;

constexpr std::string_view kEndOfText = "<|endoftext|>";
constexpr std::string_view kImStart = "<|im_start|>";
constexpr std::string_view kImEnd = "<|im_end|>";

// ChatML as Qwen2.5 writes it, less the default system message (our model has no persona), so
// model/chat wraps a prompt as <|im_start|>user\nPROMPT<|im_end|>\n<|im_start|>assistant\n.
constexpr const char* kChatTemplate =
    R"({% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %})";

const byte_level::regex& split_regex() {
  // The pattern is a constant that compiles (the tests load the files written with it).
  static const byte_level::regex re = byte_level::regex::compile(byte_level::kQwen2Pattern, false, "qwen2").value();
  return re;
}

// Byte b's id: its rank in GPT-2's alphabet order (the printable bytes first, as their characters
// sort), the order Qwen2's vocabulary and tokenizers' trainer give the initial alphabet.
std::array<std::int32_t, 256> byte_ids() {
  std::array<int, 256> order{};
  std::iota(order.begin(), order.end(), 0);
  const auto& a = byte_level::alphabet();
  auto cp = [&](int b) {
    std::size_t i = 0;
    return byte_level::next_cp(a.to_char[static_cast<std::size_t>(b)], i);
  };
  std::sort(order.begin(), order.end(), [&](int x, int y) { return cp(x) < cp(y); });
  std::array<std::int32_t, 256> id{};
  for (int r = 0; r < 256; ++r) id[static_cast<std::size_t>(order[static_cast<std::size_t>(r)])] = r;
  return id;
}

std::uint64_t pair_key(std::int32_t a, std::int32_t b) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
}

struct heap_entry {
  std::int64_t count;
  std::uint64_t key;
};
// Max-heap order: the larger count; on a tie the smaller (left, right), i.e. the smaller key.
bool heap_less(const heap_entry& x, const heap_entry& y) {
  return x.count < y.count || (x.count == y.count && x.key > y.key);
}

}  // namespace

// The working state of one train() call.
struct bpe_trainer::state {
  struct word {
    std::vector<std::int32_t> syms;
    std::int64_t count;
  };
  std::vector<word> words;
  std::unordered_map<std::uint64_t, std::int64_t> pair_count;
  // Words that held the pair when it was counted up; entries go stale as words change (rewriting
  // a word that no longer holds the pair is a no-op), never missing.
  std::unordered_map<std::uint64_t, std::vector<std::uint32_t>> where;
  std::vector<heap_entry> heap;

  void add_pair(std::int32_t a, std::int32_t b, std::int64_t n, std::uint32_t w) {
    const std::uint64_t k = pair_key(a, b);
    pair_count[k] += n;
    if (n > 0) {
      auto& list = where[k];
      if (list.empty() || list.back() != w) list.push_back(w);
    }
  }

  void push(std::uint64_t key) {
    auto it = pair_count.find(key);
    if (it == pair_count.end() || it->second <= 0) return;
    heap.push_back({it->second, key});
    std::push_heap(heap.begin(), heap.end(), heap_less);
  }

  // Replaces every (a, b) in word w by c, left to right and non-overlapping, moving the counts of
  // the neighbouring pairs; `touched` collects the pairs that gained count.
  void merge_word(std::uint32_t w, std::int32_t a, std::int32_t b, std::int32_t c, std::vector<std::uint64_t>& touched) {
    auto& s = words[w].syms;
    const std::int64_t n = words[w].count;
    std::size_t j = 0;
    const std::size_t len = s.size();
    for (std::size_t i = 0; i < len;) {
      if (i + 1 < len && s[i] == a && s[i + 1] == b) {
        if (j > 0) {  // the left neighbour as it is now (possibly a c written just before)
          add_pair(s[j - 1], a, -n, w);
          add_pair(s[j - 1], c, n, w);
          touched.push_back(pair_key(s[j - 1], c));
        }
        if (i + 2 < len) {
          add_pair(b, s[i + 2], -n, w);
          add_pair(c, s[i + 2], n, w);
          touched.push_back(pair_key(c, s[i + 2]));
        }
        s[j++] = c;
        i += 2;
      } else {
        s[j++] = s[i++];
      }
    }
    s.resize(j);
  }
};

bpe_trainer::bpe_trainer(bpe_trainer_options options) : options_(std::move(options)) {}

result<bpe_trainer> bpe_trainer::create(bpe_trainer_options options) {
  const auto specials = static_cast<std::int64_t>(options.special_tokens.size());
  if (options.vocab_size < 256 + specials)
    return error{"vocabulary size " + std::to_string(options.vocab_size) + " is too small: it needs at least 256 byte tokens + " +
                 std::to_string(specials) + " special tokens = " + std::to_string(256 + specials)};
  if (options.vocab_size > (std::int64_t{1} << 31) - 1) return error{"vocabulary size is too large"};
  if (options.min_frequency < 1) return error{"min_frequency must be at least 1"};
  for (std::size_t i = 0; i < options.special_tokens.size(); ++i) {
    if (options.special_tokens[i].empty()) return error{"special tokens must not be empty"};
    for (std::size_t k = 0; k < i; ++k)
      if (options.special_tokens[k] == options.special_tokens[i])
        return error{"special token '" + options.special_tokens[i] + "' is given twice"};
  }
  return bpe_trainer(std::move(options));
}

void bpe_trainer::add_text(std::string_view text_in) {
  const std::string text = byte_level::utf8_lossy(text_in);
  ++texts_;
  bytes_ += static_cast<std::int64_t>(text.size());
  const auto& specials = options_.special_tokens;
  // Next occurrence of each special at or after `pos` (npos: none left), found once per occurrence.
  std::vector<std::size_t> next(specials.size());
  for (std::size_t k = 0; k < specials.size(); ++k) next[k] = text.find(specials[k]);

  auto count_segment = [&](std::string_view seg) {
    std::size_t at = 0;
    auto add = [&](std::size_t b, std::size_t e) {
      ++words_[std::string(seg.substr(b, e - b))];
      ++pre_tokens_;
    };
    for (const auto& [b, e] : split_regex().find_all(seg)) {
      if (b > at) add(at, b);  // Split "Isolated" keeps what lies between matches too
      add(b, e);
      at = e;
    }
    if (at < seg.size()) add(at, seg.size());
  };

  std::size_t pos = 0;
  while (pos < text.size()) {
    // Leftmost, then longest, special token: the loader's rule for added tokens.
    std::size_t best = specials.size(), best_at = std::string::npos;
    for (std::size_t k = 0; k < specials.size(); ++k) {
      if (next[k] != std::string::npos && next[k] < pos) next[k] = text.find(specials[k], pos);
      if (next[k] == std::string::npos) continue;
      if (next[k] < best_at || (next[k] == best_at && specials[k].size() > specials[best].size())) {
        best = k;
        best_at = next[k];
      }
    }
    if (best == specials.size()) break;
    if (best_at > pos) count_segment(std::string_view(text).substr(pos, best_at - pos));
    ++special_count_;
    ++pre_tokens_;
    pos = best_at + specials[best].size();
  }
  if (pos < text.size()) count_segment(std::string_view(text).substr(pos));
}

bpe_model bpe_trainer::train(bpe_stats* stats) const {
  bpe_model model;
  model.special_tokens = options_.special_tokens;
  const auto ids = byte_ids();
  model.tokens.resize(256);
  for (int b = 0; b < 256; ++b) model.tokens[static_cast<std::size_t>(ids[static_cast<std::size_t>(b)])] = std::string(1, static_cast<char>(b));
  std::unordered_map<std::string, std::int32_t> token_id;
  for (std::size_t i = 0; i < model.tokens.size(); ++i) token_id.emplace(model.tokens[i], static_cast<std::int32_t>(i));

  state st;
  st.words.reserve(words_.size());
  for (const auto& [bytes, count] : words_) {
    state::word w;
    w.count = count;
    w.syms.reserve(bytes.size());
    for (unsigned char c : bytes) w.syms.push_back(ids[c]);
    st.words.push_back(std::move(w));
  }
  for (std::uint32_t w = 0; w < st.words.size(); ++w) {
    const auto& s = st.words[w].syms;
    for (std::size_t i = 0; i + 1 < s.size(); ++i) st.add_pair(s[i], s[i + 1], st.words[w].count, w);
  }
  for (const auto& [key, count] : st.pair_count) st.heap.push_back({count, key});
  std::make_heap(st.heap.begin(), st.heap.end(), heap_less);

  const auto bpe_target = static_cast<std::size_t>(options_.vocab_size) - options_.special_tokens.size();
  std::vector<std::uint32_t> seen(st.words.size(), 0);  // merge number + 1 that last rewrote the word
  std::vector<std::uint64_t> touched;
  while (model.tokens.size() < bpe_target && !st.heap.empty()) {
    std::pop_heap(st.heap.begin(), st.heap.end(), heap_less);
    const heap_entry top = st.heap.back();
    st.heap.pop_back();
    auto pc = st.pair_count.find(top.key);
    const std::int64_t actual = pc == st.pair_count.end() ? 0 : pc->second;
    if (actual != top.count) {  // stale: counts only fall after a pair's creating merge
      st.push(top.key);
      continue;
    }
    if (actual < options_.min_frequency) break;

    const auto a = static_cast<std::int32_t>(top.key >> 32);
    const auto b = static_cast<std::int32_t>(top.key & 0xFFFFFFFFu);
    std::string merged = model.tokens[static_cast<std::size_t>(a)] + model.tokens[static_cast<std::size_t>(b)];
    std::int32_t c = 0;
    if (auto it = token_id.find(merged); it != token_id.end()) {
      c = it->second;
    } else {
      c = static_cast<std::int32_t>(model.tokens.size());
      token_id.emplace(merged, c);
      model.tokens.push_back(std::move(merged));
    }
    model.merges.emplace_back(a, b);
    const auto stamp = static_cast<std::uint32_t>(model.merges.size());

    std::vector<std::uint32_t> holders;
    if (auto it = st.where.find(top.key); it != st.where.end()) {
      holders = std::move(it->second);
      st.where.erase(it);
    }
    touched.clear();
    for (std::uint32_t w : holders) {
      if (seen[w] == stamp) continue;
      seen[w] = stamp;
      st.merge_word(w, a, b, c, touched);
    }
    st.pair_count.erase(top.key);  // every occurrence was merged or overlapped by a merge
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    for (std::uint64_t k : touched) st.push(k);
  }

  if (stats != nullptr) {
    stats->texts = texts_;
    stats->bytes = bytes_;
    stats->pre_tokens = pre_tokens_;
    stats->unique_words = static_cast<std::int64_t>(words_.size());
    // Training merges rank by rank over whole words, which is what encoding does, so the final
    // words are the input's encoding.
    std::int64_t tokens = special_count_;
    for (const auto& w : st.words) tokens += w.count * static_cast<std::int64_t>(w.syms.size());
    stats->tokens = tokens;
  }
  return model;
}

namespace {

bool has_special(const bpe_model& m, std::string_view t) {
  return std::find(m.special_tokens.begin(), m.special_tokens.end(), t) != m.special_tokens.end();
}

ojson added_token_entry(const std::string& content) {
  ojson e;
  e["content"] = content;
  e["single_word"] = false;
  e["lstrip"] = false;
  e["rstrip"] = false;
  e["normalized"] = false;
  e["special"] = true;
  return e;
}

ojson byte_level_step() {
  return ojson{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
}

}  // namespace

std::string tokenizer_json(const bpe_model& model) {
  ojson j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  ojson added = ojson::array();
  for (std::size_t i = 0; i < model.special_tokens.size(); ++i) {
    ojson e;
    e["id"] = model.special_id(i);
    const ojson entry = added_token_entry(model.special_tokens[i]);
    for (const auto& [k, v] : entry.items()) e[k] = v;
    added.push_back(std::move(e));
  }
  j["added_tokens"] = std::move(added);
  j["normalizer"] = nullptr;  // no NFC: the tokenizer is lossless on any text
  ojson split{{"type", "Split"},
              {"pattern", {{"Regex", byte_level::kQwen2Pattern}}},
              {"behavior", "Isolated"},
              {"invert", false}};
  j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", ojson::array({split, byte_level_step()})}};
  j["post_processor"] = byte_level_step();
  j["decoder"] = byte_level_step();
  ojson m;
  m["type"] = "BPE";
  m["dropout"] = nullptr;
  m["unk_token"] = nullptr;
  m["continuing_subword_prefix"] = nullptr;
  m["end_of_word_suffix"] = nullptr;
  m["fuse_unk"] = false;
  m["byte_fallback"] = false;
  m["ignore_merges"] = false;
  ojson vocab = ojson::object();
  for (std::size_t i = 0; i < model.tokens.size(); ++i) vocab[byte_level::to_alphabet(model.tokens[i])] = i;
  m["vocab"] = std::move(vocab);
  ojson merges = ojson::array();
  for (const auto& [a, b] : model.merges)
    merges.push_back(ojson::array({byte_level::to_alphabet(model.tokens[static_cast<std::size_t>(a)]),
                                   byte_level::to_alphabet(model.tokens[static_cast<std::size_t>(b)])}));
  m["merges"] = std::move(merges);
  j["model"] = std::move(m);
  return j.dump(2) + "\n";
}

std::string tokenizer_config_json(const bpe_model& model) {
  ojson j;
  j["add_bos_token"] = false;
  j["add_prefix_space"] = false;
  ojson decoder = ojson::object();
  for (std::size_t i = 0; i < model.special_tokens.size(); ++i)
    decoder[std::to_string(model.special_id(i))] = added_token_entry(model.special_tokens[i]);
  j["added_tokens_decoder"] = std::move(decoder);
  const bool chatml = has_special(model, kImStart) && has_special(model, kImEnd);
  const bool eot = has_special(model, kEndOfText);
  ojson extra = ojson::array();
  for (const auto& t : model.special_tokens)
    if (!(chatml && t == kImEnd) && !(eot && t == kEndOfText)) extra.push_back(t);
  j["additional_special_tokens"] = std::move(extra);
  j["bos_token"] = nullptr;
  if (chatml) j["chat_template"] = kChatTemplate;
  j["clean_up_tokenization_spaces"] = false;
  j["eos_token"] = chatml ? ojson(std::string(kImEnd)) : eot ? ojson(std::string(kEndOfText)) : ojson(nullptr);
  j["pad_token"] = eot ? ojson(std::string(kEndOfText)) : ojson(nullptr);
  j["split_special_tokens"] = false;
  j["tokenizer_class"] = "PreTrainedTokenizerFast";
  j["unk_token"] = nullptr;
  return j.dump(2) + "\n";
}

status write_tokenizer_files(const bpe_model& model, const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return error{dir + ": cannot create the directory: " + ec.message()};
  if (auto s = write_text_file_atomically((fs::path(dir) / "tokenizer.json").string(), tokenizer_json(model)); !s)
    return s;
  return write_text_file_atomically((fs::path(dir) / "tokenizer_config.json").string(), tokenizer_config_json(model));
}

}  // namespace kforge::model

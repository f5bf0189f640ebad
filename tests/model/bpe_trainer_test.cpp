#include "model/bpe_trainer.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <random>

#include <nlohmann/json.hpp>

#include "model/byte_level.hpp"
#include "model/chat.hpp"
#include "model/tokenizer.hpp"
#include "tests/model/test_files.hpp"

using namespace kforge::model;
using namespace kforge::model::testing;
using json = nlohmann::json;

namespace {

bpe_trainer make_trainer(std::int64_t vocab, std::int64_t min_frequency = 2) {
  bpe_trainer_options o;
  o.vocab_size = vocab;
  o.min_frequency = min_frequency;
  auto t = bpe_trainer::create(o);
  REQUIRE_MESSAGE(t.ok(), (t.ok() ? "" : t.message()));
  return std::move(t).value();
}

bpe_model train_on(const std::vector<std::string>& texts, std::int64_t vocab, std::int64_t min_frequency = 2,
                   bpe_stats* stats = nullptr) {
  auto t = make_trainer(vocab, min_frequency);
  for (const auto& s : texts) t.add_text(s);
  return t.train(stats);
}

// The merges as byte-level strings, "a b", for readable expectations.
std::vector<std::string> merge_strings(const bpe_model& m) {
  std::vector<std::string> out;
  for (const auto& [a, b] : m.merges)
    out.push_back(kforge::model::byte_level::to_alphabet(m.tokens[static_cast<std::size_t>(a)]) + " " +
                  kforge::model::byte_level::to_alphabet(m.tokens[static_cast<std::size_t>(b)]));
  return out;
}

// CUDA-flavoured text with some repetition, unicode and odd whitespace.
std::vector<std::string> cuda_corpus(int n, unsigned seed) {
  const std::vector<std::string> parts = {
      "__global__ void add_kernel(const float* __restrict__ a, const float* __restrict__ b, float* out, int n) {\n",
      "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n",
      "  if (i < n) out[i] = a[i] + b[i];\n}\n",
      "    __shared__ float tile[32][33];\n",
      "\tfor (int k = 0; k < K; k += 32) {\n",
      "  acc += __shfl_down_sync(0xffffffff, acc, 16);\r\n",
      "Write a fast CUDA kernel for: y = relu(x @ W^T + b) with x of shape (4096, 1024).\n",
      "// Größe der Kachel: 32×32 — 你好，世界 ✓ 🚀\n",
      "torch::Tensor forward(torch::Tensor x) { return x.relu(); }\n",
      "aaaa abababab  \n\n\n   ",
      "<|im_start|>user\nhello<|im_end|>\n",
  };
  std::mt19937 rng(seed);
  std::vector<std::string> texts;
  for (int t = 0; t < n; ++t) {
    std::string s;
    const int k = 1 + static_cast<int>(rng() % 6);
    for (int j = 0; j < k; ++j) s += parts[rng() % parts.size()];
    s += "int v" + std::to_string(rng() % 1000) + " = " + std::to_string(rng() % 100000) + ";\n";
    texts.push_back(std::move(s));
  }
  return texts;
}

// The textbook algorithm, recounting every pair before each merge: what the incremental trainer
// must reproduce merge for merge (same pre-tokens, same byte ids, same tie rule).
std::vector<std::pair<std::string, std::string>> naive_merges(const std::vector<std::string>& texts,
                                                              std::size_t merges_wanted, std::int64_t min_frequency) {
  const auto re = kforge::model::byte_level::regex::compile(kforge::model::byte_level::kQwen2Pattern, false, "t").value();
  std::map<std::string, std::int64_t> words;
  for (const auto& text : texts) {
    // Specials are split off as the trainer does (only the ChatML ones appear in the corpus).
    std::vector<std::string> segs;
    std::size_t pos = 0;
    while (true) {
      std::size_t best = std::string::npos, len = 0;
      for (std::string sp : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
        auto at = text.find(sp, pos);
        if (at < best) best = at, len = sp.size();
      }
      segs.push_back(text.substr(pos, best == std::string::npos ? std::string::npos : best - pos));
      if (best == std::string::npos) break;
      pos = best + len;
    }
    for (const auto& seg : segs) {
      std::size_t at = 0;
      for (auto [b, e] : re.find_all(seg)) {
        if (b > at) ++words[seg.substr(at, b - at)];
        ++words[seg.substr(b, e - b)];
        at = e;
      }
      if (at < seg.size()) ++words[seg.substr(at)];
    }
  }
  // Symbols as byte strings; the id order of a token is its byte id or its creation order.
  std::map<std::string, int> id;
  {
    std::vector<int> order(256);
    for (int b = 0; b < 256; ++b) order[static_cast<std::size_t>(b)] = b;
    auto cp = [](int b) {
      std::size_t i = 0;
      return kforge::model::byte_level::next_cp(kforge::model::byte_level::alphabet().to_char[static_cast<std::size_t>(b)], i);
    };
    std::sort(order.begin(), order.end(), [&](int x, int y) { return cp(x) < cp(y); });
    for (int r = 0; r < 256; ++r) id[std::string(1, static_cast<char>(order[static_cast<std::size_t>(r)]))] = r;
  }
  std::vector<std::pair<std::vector<std::string>, std::int64_t>> ws;
  for (const auto& [w, c] : words) {
    std::vector<std::string> syms;
    for (char ch : w) syms.emplace_back(1, ch);
    ws.emplace_back(std::move(syms), c);
  }
  std::vector<std::pair<std::string, std::string>> out;
  while (out.size() < merges_wanted) {
    std::map<std::pair<int, int>, std::int64_t> counts;
    for (const auto& [syms, c] : ws)
      for (std::size_t i = 0; i + 1 < syms.size(); ++i) counts[{id[syms[i]], id[syms[i + 1]]}] += c;
    std::pair<int, int> best{};
    std::int64_t best_count = 0;
    for (const auto& [p, c] : counts)  // map order: the first of the largest count is the smallest pair
      if (c > best_count) best = p, best_count = c;
    if (best_count < min_frequency || best_count == 0) break;
    std::string a, b;
    for (const auto& [s, i] : id) {
      if (i == best.first) a = s;
      if (i == best.second) b = s;
    }
    if (!id.count(a + b)) {
      const int next = static_cast<int>(id.size());
      id[a + b] = next;
    }
    out.emplace_back(a, b);
    for (auto& [syms, c] : ws) {
      std::vector<std::string> merged;
      for (std::size_t i = 0; i < syms.size();) {
        if (i + 1 < syms.size() && syms[i] == a && syms[i + 1] == b) {
          merged.push_back(a + b);
          i += 2;
        } else {
          merged.push_back(syms[i++]);
        }
      }
      syms = std::move(merged);
    }
  }
  return out;
}

tokenizer write_and_load(const bpe_model& m, const scratch_dir& dir) {
  REQUIRE(write_tokenizer_files(m, dir.path()).ok());
  auto t = tokenizer::load(dir.path());
  REQUIRE_MESSAGE(t.ok(), (t.ok() ? "" : t.message()));
  return t.value();
}

}  // namespace

TEST_CASE("bpe_trainer: the merges of a hand-checked text, ties to the smaller pair") {
  // "aaabdaaabac": (a,a) 4 times first; then (a,b) and (aa,a) both 2: a=64, b=65, aa=256, so (a,b)
  // wins the tie; then (aa,ab) 2; every other pair is seen once.
  const bpe_model m = train_on({"aaabdaaabac"}, 1000);
  CHECK(merge_strings(m) == std::vector<std::string>{"a a", "a b", "aa ab"});
  REQUIRE(m.tokens.size() == 259);
  CHECK(m.tokens[256] == "aa");
  CHECK(m.tokens[257] == "ab");
  CHECK(m.tokens[258] == "aaab");
  CHECK(m.tokens[0] == "!");  // bytes in GPT-2's order, as Qwen2's vocabulary starts
  CHECK(m.tokens[64] == "a");
  CHECK(m.vocab_size() == 262);
  CHECK(m.special_id(2) == 261);

  // Pre-tokens keep their leading space (Ġ); "ab" 3 times before "Ġab" twice.
  CHECK(merge_strings(train_on({"ab ab ab"}, 1000)) == std::vector<std::string>{"a b", "Ġ ab"});
  // With min_frequency 1 a pair seen once merges too.
  CHECK(merge_strings(train_on({"xy"}, 1000, 1)) == std::vector<std::string>{"x y"});
  CHECK(train_on({"xy"}, 1000, 2).merges.empty());
}

TEST_CASE("bpe_trainer: the incremental counts give the merges of the recount-everything algorithm") {
  const auto texts = cuda_corpus(300, 7);
  for (std::int64_t min_frequency : {1, 2, 5}) {
    CAPTURE(min_frequency);
    const bpe_model m = train_on(texts, 256 + 3 + 400, min_frequency);
    const auto want = naive_merges(texts, 400, min_frequency);
    REQUIRE(m.merges.size() == want.size());
    for (std::size_t i = 0; i < want.size(); ++i) {
      CAPTURE(i);
      CHECK(m.tokens[static_cast<std::size_t>(m.merges[i].first)] == want[i].first);
      CHECK(m.tokens[static_cast<std::size_t>(m.merges[i].second)] == want[i].second);
    }
  }
}

TEST_CASE("bpe_trainer: deterministic, whatever the order of the texts") {
  auto texts = cuda_corpus(200, 3);
  const std::string first = tokenizer_json(train_on(texts, 600));
  CHECK(tokenizer_json(train_on(texts, 600)) == first);
  std::reverse(texts.begin(), texts.end());
  CHECK(tokenizer_json(train_on(texts, 600)) == first);
}

TEST_CASE("bpe_trainer: written files load, reach the vocabulary size and round-trip any text") {
  bpe_stats stats;
  const auto texts = cuda_corpus(400, 11);
  const bpe_model m = train_on(texts, 450, 2, &stats);
  CHECK(m.vocab_size() == 450);
  CHECK(m.merges.size() >= 450 - 256 - 3);
  scratch_dir dir;
  const tokenizer tok = write_and_load(m, dir);
  CHECK(tok.vocab_size() == 450);

  // The trainer's own count of the input's tokens is what the loader's encoder produces.
  std::int64_t tokens = 0, bytes = 0;
  for (const auto& t : texts) {
    tokens += static_cast<std::int64_t>(tok.encode(t).size());
    bytes += static_cast<std::int64_t>(t.size());
  }
  CHECK(stats.tokens == tokens);
  CHECK(stats.bytes == bytes);
  CHECK(stats.texts == 400);
  CHECK(stats.bytes_per_token() > 2.0);

  const std::vector<std::string> samples = {
      "",
      " ",
      "__global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }\n",
      "Größe 32×32 — 你好，世界 ✓ 🚀 עברית ﷽",
      "\t\t  \r\n\r\n    trailing   ",
      "12345678901234567890 0x7fffffff 1e-5f",
      "never seen: qzxjv QZXJV ǅ ǈ",
      "a<|im_end|>b<|endoftext|><|im_start|>",
      "<|im_start|>not closed <|im_",
      std::string("\x00\x01\x7f", 3),
  };
  for (const auto& s : samples) {
    CAPTURE(s);
    CHECK(tok.decode(tok.encode(s)) == s);
  }
  for (const auto& t : texts) CHECK(tok.decode(tok.encode(t)) == t);
}

TEST_CASE("bpe_trainer: special tokens are single ids after the BPE vocabulary") {
  const bpe_model m = train_on(cuda_corpus(100, 5), 400);
  scratch_dir dir;
  const tokenizer tok = write_and_load(m, dir);
  const std::int64_t eot = m.special_id(0), start = m.special_id(1), end = m.special_id(2);
  CHECK(eot == static_cast<std::int64_t>(m.tokens.size()));
  CHECK(tok.token_to_id("<|endoftext|>") == std::optional<std::int64_t>{eot});
  CHECK(tok.token_to_id("<|im_start|>") == std::optional<std::int64_t>{start});
  CHECK(tok.token_to_id("<|im_end|>") == std::optional<std::int64_t>{end});
  for (auto id : {eot, start, end}) CHECK(tok.is_special(id));
  CHECK(tok.encode("<|im_end|>") == std::vector<std::int64_t>{end});
  const auto ids = tok.encode("<|im_start|>user\nhi<|im_end|>\n<|endoftext|>");
  REQUIRE(ids.size() >= 5);
  CHECK(ids.front() == start);
  CHECK(ids.back() == eot);
  CHECK(std::count(ids.begin(), ids.end(), end) == 1);
  CHECK(tok.decode(ids, /*skip_special_tokens=*/true) == "user\nhi\n");
}

TEST_CASE("bpe_trainer: tokenizer_config gives ChatML, eos <|im_end|>, pad <|endoftext|>, no bos") {
  const bpe_model m = train_on(cuda_corpus(50, 2), 300);
  scratch_dir dir;
  const tokenizer tok = write_and_load(m, dir);
  auto d = load_generation_defaults(dir.path(), tok);
  REQUIRE_MESSAGE(d.ok(), (d.ok() ? "" : d.message()));
  CHECK(d->stop_tokens == std::vector<std::int64_t>{m.special_id(2)});
  CHECK(d->pad_token == std::optional<std::int64_t>{m.special_id(0)});
  CHECK_FALSE(d->bos_token.has_value());
  auto f = detect_chat_format(d->chat_template, tok, d->bos_token, "tokenizer_config.json");
  REQUIRE_MESSAGE(f.ok(), (f.ok() ? "" : f.message()));
  CHECK(f->style == chat_style::chatml);
  CHECK(f->system.empty());
  const std::string wrapped = f->wrap("Write a kernel.");
  CHECK(wrapped == "<|im_start|>user\nWrite a kernel.<|im_end|>\n<|im_start|>assistant\n");
  CHECK(tok.encode(wrapped, f->add_special_tokens()).front() == m.special_id(1));

  const json cfg = json::parse(read_text(dir.path("tokenizer_config.json")));
  CHECK(cfg["eos_token"] == "<|im_end|>");
  CHECK(cfg["added_tokens_decoder"][std::to_string(m.special_id(1))]["content"] == "<|im_start|>");
  const json tj = json::parse(read_text(dir.path("tokenizer.json")));
  CHECK(tj["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] ==
        json::parse(read_text(fixtures("tokenizer/tokenizer.json")))["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"]);
  CHECK(tj["model"]["vocab"].size() == m.tokens.size());
  CHECK(tj["model"]["merges"].size() == m.merges.size());
}

TEST_CASE("bpe_trainer: options are checked") {
  bpe_trainer_options o;
  o.vocab_size = 258;
  auto t = bpe_trainer::create(o);
  REQUIRE_FALSE(t.ok());
  CHECK(t.message().find("259") != std::string::npos);
  o.vocab_size = 259;
  CHECK(bpe_trainer::create(o).ok());
  o.special_tokens = {"<|a|>", "<|a|>"};
  CHECK_FALSE(bpe_trainer::create(o).ok());
  o.special_tokens = {""};
  CHECK_FALSE(bpe_trainer::create(o).ok());
  o.special_tokens = {"<|endoftext|>"};
  o.min_frequency = 0;
  CHECK_FALSE(bpe_trainer::create(o).ok());
  // The smallest vocabulary learns nothing and still writes a working tokenizer.
  o.min_frequency = 1;
  o.vocab_size = 257;
  auto small = bpe_trainer::create(o);
  REQUIRE(small.ok());
  small->add_text("hello hello");
  const bpe_model m = small->train();
  CHECK(m.merges.empty());
  scratch_dir dir;
  const tokenizer tok = write_and_load(m, dir);
  CHECK(tok.encode("hi").size() == 2);
  CHECK(tok.decode(tok.encode("hello")) == "hello");
}

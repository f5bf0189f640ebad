// The torch-free half of pretrain.hpp: options checks, tokenization, data file, split, batches,
// learning-rate schedule.
#include "trainer/pretrain.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "common/hash.hpp"

namespace kforge::trainer {
namespace {

namespace fs = std::filesystem;

/// splitmix64: decorrelates (seed, stream) pairs so that nearby seeds give unrelated streams.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// Fisher-Yates with mt19937_64, whose output the standard fixes (std::shuffle and the
/// distributions are not: another standard library would shuffle differently).
template <class T>
void shuffle(std::vector<T>& v, std::mt19937_64& rng) {
  for (std::size_t i = v.size(); i > 1; --i) {
    const std::size_t j = static_cast<std::size_t>(rng() % i);
    std::swap(v[i - 1], v[j]);
  }
}

std::string hex64(std::uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

bool valid_device(const std::string& d) {
  if (d == "auto" || d == "cpu" || d == "cuda") return true;
  if (d.rfind("cuda:", 0) != 0 || d.size() == 5) return false;
  return std::all_of(d.begin() + 5, d.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

status validate(const pretrain_options& o) {
  auto positive = [](std::int64_t v, const char* flag) -> status {
    if (v < 1) return error{std::string(flag) + " " + std::to_string(v) + ": must be >= 1"};
    return {};
  };
  if (o.data.empty()) return error{"--data: missing (a JSON-lines file of prompt/completion or prompt/turns records)"};
  if (o.tokenizer_dir.empty()) return error{"--tokenizer: missing (a directory with tokenizer.json)"};
  if (o.out.empty()) return error{"--out: missing (the checkpoint directory to write)"};
  if (!o.init_from.empty() && !o.shape_flags.empty())
    return error{o.shape_flags.front() + " with --init: the model's shape comes from " + o.init_from +
                 "/config.json (leave the shape flags out)"};
  if (!o.init_from.empty() && !std::filesystem::is_regular_file(std::filesystem::path(o.init_from) / "config.json"))
    return error{"--init " + o.init_from + ": no config.json there (not a checkpoint kforge pretrain wrote)"};
  for (auto [v, flag] : {std::pair{o.hidden_size, "--hidden"}, {o.num_layers, "--layers"},
                         {o.num_heads, "--heads"}, {o.num_kv_heads, "--kv-heads"},
                         {o.intermediate_size, "--intermediate"}, {o.max_positions, "--max-positions"},
                         {o.batch_size, "--batch"}, {o.log_every, "--log-every"},
                         {o.vocab_multiple, "vocab_multiple"}})
    if (auto s = positive(v, flag); !s) return s;
  if (o.lead_tokens < 0) return error{"--lead-tokens " + std::to_string(o.lead_tokens) + ": must be >= 0"};
  if (!(o.lead_weight > 0) || !std::isfinite(o.lead_weight))
    return error{"--lead-weight " + std::to_string(o.lead_weight) + ": must be a positive number"};
  if (o.focus_from.empty() != o.focus_to.empty())
    return error{"--focus-from and --focus-to: give both (the span's first and last text) or neither"};
  if (!(o.focus_weight > 0) || !std::isfinite(o.focus_weight))
    return error{"--focus-weight " + std::to_string(o.focus_weight) + ": must be a positive number"};
  if (o.hidden_size % o.num_heads != 0)
    return error{"--heads " + std::to_string(o.num_heads) + " does not divide --hidden " +
                 std::to_string(o.hidden_size)};
  if ((o.hidden_size / o.num_heads) % 2 != 0)
    return error{"--hidden " + std::to_string(o.hidden_size) + " / --heads " + std::to_string(o.num_heads) +
                 " = head size " + std::to_string(o.hidden_size / o.num_heads) +
                 ": must be even (rotary embeddings rotate pairs)"};
  if (o.num_heads % o.num_kv_heads != 0)
    return error{"--kv-heads " + std::to_string(o.num_kv_heads) + " does not divide --heads " +
                 std::to_string(o.num_heads)};
  if (o.max_len < 2) return error{"--max-len " + std::to_string(o.max_len) + ": must be >= 2"};
  if (o.max_completion_tokens < 0)
    return error{"--max-completion-tokens " + std::to_string(o.max_completion_tokens) + ": must be >= 0"};
  // With --init the positions are the checkpoint's, checked against --max-len once it is read.
  if (o.init_from.empty() && o.max_len > o.max_positions)
    return error{"--max-len " + std::to_string(o.max_len) + " exceeds --max-positions " +
                 std::to_string(o.max_positions)};
  if (!(o.val_fraction >= 0 && o.val_fraction < 1))
    return error{"--val-fraction " + std::to_string(o.val_fraction) + ": must be in [0, 1)"};
  if (o.batch_tokens < 0) return error{"--batch-tokens: must be >= 0"};
  if (o.micro_batch_tokens < 0) return error{"--micro-batch-tokens: must be >= 0"};
  if (o.steps < 0) return error{"--steps " + std::to_string(o.steps) + ": must be >= 0"};
  if (o.steps == 0 && o.epochs < 1) return error{"--epochs " + std::to_string(o.epochs) + ": must be >= 1"};
  if (o.eval_every < 0) return error{"--eval-every: must be >= 0"};
  if (!(o.lr > 0) || !std::isfinite(o.lr)) return error{"--lr: must be a positive number"};
  if (!(o.min_lr_ratio >= 0 && o.min_lr_ratio <= 1)) return error{"--min-lr-ratio: must be in [0, 1]"};
  if (!(o.warmup_fraction >= 0 && o.warmup_fraction < 1)) return error{"--warmup: must be in [0, 1)"};
  if (!(o.beta1 >= 0 && o.beta1 < 1) || !(o.beta2 >= 0 && o.beta2 < 1))
    return error{"AdamW betas: must be in [0, 1)"};
  if (!(o.adam_eps > 0)) return error{"AdamW eps: must be > 0"};
  if (!(o.weight_decay >= 0)) return error{"--weight-decay: must be >= 0"};
  if (!(o.rope_theta > 0)) return error{"--rope-theta: must be > 0"};
  if (!(o.rms_norm_eps > 0)) return error{"rms_norm_eps: must be > 0"};
  if (!(o.init_std > 0)) return error{"init_std: must be > 0"};
  if (!valid_device(o.device))
    return error{"--device '" + o.device + "': expected auto, cpu, cuda or cuda:N"};
  return {};
}

result<sft_format> load_sft_format(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return error{dir + ": not a directory (--tokenizer names a tokenizer directory)"};
  if (!fs::exists(fs::path(dir) / "tokenizer.json", ec))
    return error{dir + ": no tokenizer.json in the tokenizer directory"};
  auto tok = model::tokenizer::load(dir);
  if (!tok) return tok.err();
  // As make_engine_sampler reads a checkpoint whose tokenizer directory is its own.
  auto defaults = model::load_generation_defaults(dir, *tok, dir);
  if (!defaults) return defaults.err();
  auto chat = model::detect_chat_format(defaults->chat_template, *tok, defaults->bos_token,
                                        (fs::path(dir) / "tokenizer_config.json").string());
  if (!chat) return chat.err();
  sft_format f{std::move(*tok), std::move(*chat), 0, 0, defaults->bos_token};
  // The token the model must learn to end its turn with: the one the chat format closes an
  // assistant turn with, which the sampler stops at (it is among its stop tokens as the written
  // generation_config.json's eos).
  std::optional<std::int64_t> eos;
  if (f.chat.style == model::chat_style::chatml) {
    eos = f.tok.token_to_id("<|im_end|>");
  } else if (f.chat.style == model::chat_style::llama3) {
    eos = f.tok.token_to_id("<|eot_id|>");
  } else if (!defaults->stop_tokens.empty()) {
    eos = defaults->stop_tokens.front();
  }
  if (!eos)
    return error{dir + ": no end-of-completion token: tokenizer_config.json has neither a chat template nor an "
                       "eos_token"};
  f.eos = *eos;
  f.pad = defaults->pad_token.value_or(f.eos);
  return f;
}

sft_example tokenize_example(const sft_format& fmt, std::string_view prompt, std::string_view completion,
                             bool end_turn) {
  sft_example ex;
  // Encoded separately, as the sampler encodes the wrapped prompt and then appends sampled tokens:
  // encoding the concatenation could merge tokens across the boundary that sampling never sees.
  ex.ids = fmt.tok.encode(fmt.chat.wrap(prompt), fmt.chat.add_special_tokens());
  ex.prompt_tokens = static_cast<std::int64_t>(ex.ids.size());
  const auto c = fmt.tok.encode(completion, /*add_special_tokens=*/false);
  ex.ids.insert(ex.ids.end(), c.begin(), c.end());
  if (end_turn) ex.ids.push_back(fmt.eos);
  return ex;
}

sft_example tokenize_turns(const sft_format& fmt, std::string_view prompt, const std::vector<sft_turn>& turns) {
  sft_example ex;
  ex.ids = fmt.tok.encode(fmt.chat.wrap(prompt), fmt.chat.add_special_tokens());
  ex.prompt_tokens = static_cast<std::int64_t>(ex.ids.size());
  for (std::size_t k = 0; k < turns.size(); ++k) {
    const sft_turn& t = turns[k];
    sft_turn_span span;
    span.begin = static_cast<std::int64_t>(ex.ids.size());
    span.train = t.train;
    // The completion as sampled tokens, which stopped at the end-of-turn token.
    const auto c = fmt.tok.encode(t.completion, /*add_special_tokens=*/false);
    ex.ids.insert(ex.ids.end(), c.begin(), c.end());
    ex.ids.push_back(fmt.eos);
    span.end = static_cast<std::int64_t>(ex.ids.size());
    ex.turns.push_back(span);
    if (k + 1 == turns.size()) break;
    // The observation as engine_policy::follow_up_ids appends it after a turn that ended with a
    // stop token (fmt.eos is the sampler's first stop token): the previous turn is closed.
    const auto o = fmt.tok.encode(fmt.chat.follow_up(t.observation.value_or(""), /*closed=*/true),
                                  /*add_special_tokens=*/false);
    ex.ids.insert(ex.ids.end(), o.begin(), o.end());
  }
  return ex;
}

std::vector<std::pair<std::int64_t, std::int64_t>> target_spans(const sft_example& ex) {
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  const auto n = static_cast<std::int64_t>(ex.ids.size());
  if (ex.turns.empty()) {
    const std::int64_t first = std::max<std::int64_t>(ex.prompt_tokens, 1);
    if (first < n) out.emplace_back(first, n);
    return out;
  }
  for (const auto& t : ex.turns) {
    const std::int64_t b = std::max<std::int64_t>(t.begin, 1), e = std::min(t.end, n);
    if (t.train && b < e) out.emplace_back(b, e);
  }
  return out;
}

std::int64_t target_count(const sft_example& ex) {
  std::int64_t n = 0;
  for (const auto& [b, e] : target_spans(ex)) n += e - b;
  return n;
}

std::vector<std::uint8_t> target_mask(const sft_example& ex) {
  std::vector<std::uint8_t> m(ex.ids.size(), 0);
  for (const auto& [b, e] : target_spans(ex))
    std::fill(m.begin() + static_cast<std::ptrdiff_t>(b), m.begin() + static_cast<std::ptrdiff_t>(e), 1);
  return m;
}

namespace {

// The completion's focus spans as token ranges of ex.ids: each text span from `from` to the end of
// the next `to` (literal), mapped through the bytes each completion token decodes to. `first`: the
// position of the completion's first token in ex.ids. Nothing is marked when the tokens do not
// decode back to exactly the completion's bytes.
void mark_focus(const sft_format& fmt, sft_example& ex, std::string_view completion, std::size_t first,
                const std::string& from, const std::string& to,
                std::unordered_map<std::int64_t, std::size_t>& token_bytes) {
  std::vector<std::pair<std::size_t, std::size_t>> spans;  // byte ranges of the completion
  for (auto at = completion.find(from); at != std::string_view::npos;) {
    const auto end = completion.find(to, at + from.size());
    if (end == std::string_view::npos) break;
    spans.emplace_back(at, end + to.size());
    at = completion.find(from, end + to.size());
  }
  if (spans.empty()) return;
  std::size_t offset = 0;
  std::vector<std::size_t> starts;  // byte offset of each completion token
  for (std::size_t i = first; i < ex.ids.size() && offset <= completion.size(); ++i) {
    auto it = token_bytes.find(ex.ids[i]);
    if (it == token_bytes.end()) it = token_bytes.emplace(ex.ids[i], fmt.tok.decode({ex.ids[i]}).size()).first;
    starts.push_back(offset);
    offset += it->second;
    if (offset == completion.size()) break;  // an end-of-turn token may follow
  }
  if (offset != completion.size()) return;
  for (const auto& [b, e] : spans) {
    std::int64_t lo = -1, hi = -1;
    for (std::size_t k = 0; k < starts.size(); ++k) {
      const std::size_t tb = starts[k], te = k + 1 < starts.size() ? starts[k + 1] : completion.size();
      if (tb < e && te > b) {
        if (lo < 0) lo = static_cast<std::int64_t>(first + k);
        hi = static_cast<std::int64_t>(first + k + 1);
      }
    }
    if (lo >= 0) ex.focus.emplace_back(lo, hi);
  }
}

// The "turns" of a multi-turn record `j` (which has them), checked: errors start with `where`
// ("FILE:LINE: ") and name the turn (1-based).
result<std::vector<sft_turn>> parse_turns(const nlohmann::json& j, const std::string& where) {
  if (!j.contains("prompt")) return error{where + "no \"prompt\""};
  if (!j["prompt"].is_string()) return error{where + "\"prompt\" must be a string"};
  if (j.contains("completion"))
    return error{where + "both \"completion\" and \"turns\": a record is single-turn (\"completion\") or "
                         "multi-turn (\"turns\"), not both"};
  if (j.contains("prefix_only"))
    return error{where + "\"prefix_only\" with \"turns\": only a single-turn record can be a prefix"};
  const auto& turns = j["turns"];
  if (!turns.is_array() || turns.empty())
    return error{where + "\"turns\" must be a non-empty array of {\"completion\", \"observation\", \"train\"}"};
  std::vector<sft_turn> out;
  bool any_trained = false;
  for (std::size_t k = 0; k < turns.size(); ++k) {
    const auto& t = turns[k];
    const bool last = k + 1 == turns.size();
    const std::string turn = where + "turn " + std::to_string(k + 1) + " of " + std::to_string(turns.size()) + ": ";
    if (!t.is_object()) return error{turn + "not a JSON object"};
    if (!t.contains("completion")) return error{turn + "no \"completion\""};
    if (!t["completion"].is_string()) return error{turn + "\"completion\" must be a string"};
    sft_turn s;
    s.completion = t["completion"].get<std::string>();
    if (t.contains("observation")) {
      if (last)
        return error{turn + "an \"observation\" on the last turn (only a turn that another follows has one)"};
      if (!t["observation"].is_string()) return error{turn + "\"observation\" must be a string"};
      s.observation = t["observation"].get<std::string>();
    } else if (!last) {
      return error{turn + "no \"observation\" (every turn but the last has one: what the next turn is told)"};
    }
    if (t.contains("train")) {
      if (!t["train"].is_boolean()) return error{turn + "\"train\" must be true or false"};
      s.train = t["train"].get<bool>();
    }
    any_trained = any_trained || s.train;
    out.push_back(std::move(s));
  }
  if (!any_trained) return error{where + "no turn is trained (every turn has \"train\": false)"};
  return out;
}

}  // namespace

double target_weight(const sft_example& ex, std::int64_t t, const pretrain_options& o) {
  double w = 1.0;
  // The start of t's completion: the prompt's end, or (multi turn) the start of t's turn.
  std::int64_t start = ex.prompt_tokens;
  for (const auto& turn : ex.turns)
    if (t >= turn.begin && t < turn.end) start = turn.begin;
  if (t - std::max<std::int64_t>(start, 1) < o.lead_tokens) w = std::max(w, o.lead_weight);
  for (const auto& [b, e] : ex.focus)
    if (t >= b && t < e) w = std::max(w, o.focus_weight);
  return w;
}

result<sft_dataset> read_sft_data(const std::string& path, const sft_format& fmt, std::int64_t max_len,
                                  const std::string& focus_from, const std::string& focus_to,
                                  std::int64_t max_completion) {
  std::unordered_map<std::int64_t, std::size_t> token_bytes;
  std::error_code ec;
  if (fs::is_directory(path, ec)) return error{path + ": is a directory, expected a JSON-lines file"};
  std::ifstream in(path, std::ios::binary);
  if (!in) return error{path + ": cannot read"};
  sft_dataset d;
  std::uint64_t h = fnv1a64("", 0);
  std::string line;
  std::int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    h = fnv1a64(line.data(), line.size(), h);
    if (!in.eof()) h = fnv1a64("\n", 1, h);
    d.bytes += static_cast<std::int64_t>(line.size()) + (in.eof() ? 0 : 1);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(line_no) + ": ";
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return error{where + "not valid JSON"};
    if (!j.is_object()) return error{where + "not a JSON object"};
    sft_example ex;
    // With focus spans: the completions they are marked in, (text, position of its first token in
    // ex.ids): the single completion, or every trained turn's.
    const bool focus = !focus_from.empty() && !focus_to.empty();
    std::vector<std::pair<std::string, std::size_t>> learnt;
    if (j.contains("turns")) {
      auto turns = parse_turns(j, where);
      if (!turns) return turns.err();
      ex = tokenize_turns(fmt, j["prompt"].get<std::string>(), *turns);
      for (std::size_t k = 0; k < ex.turns.size() && focus; ++k)
        if (ex.turns[k].train)
          learnt.emplace_back(std::move((*turns)[k].completion), static_cast<std::size_t>(ex.turns[k].begin));
    } else {
      for (const char* key : {"prompt", "completion"}) {
        if (!j.contains(key)) return error{where + "no \"" + key + "\""};
        if (!j[key].is_string()) return error{where + "\"" + key + "\" must be a string"};
      }
      bool prefix_only = false;
      if (j.contains("prefix_only")) {
        if (!j["prefix_only"].is_boolean()) return error{where + "\"prefix_only\" must be true or false"};
        prefix_only = j["prefix_only"].get<bool>();
      }
      ex = tokenize_example(fmt, j["prompt"].get<std::string>(), j["completion"].get<std::string>(), !prefix_only);
      if (focus) learnt.emplace_back(j["completion"].get<std::string>(), static_cast<std::size_t>(ex.prompt_tokens));
    }
    ++d.records;
    const auto n = static_cast<std::int64_t>(ex.ids.size());
    if (n > max_len) {
      ++d.dropped_too_long;
      d.longest_dropped = std::max(d.longest_dropped, n);
      continue;
    }
    // The longest completion, end token included: every turn's, trained or not, multi turn.
    std::int64_t c = n - ex.prompt_tokens;
    if (!ex.turns.empty()) {
      c = 0;
      for (const auto& t : ex.turns) c = std::max(c, t.end - t.begin);
    }
    if (max_completion > 0 && c > max_completion) {
      ++d.dropped_long_completion;
      d.longest_completion_dropped = std::max(d.longest_completion_dropped, c);
      continue;
    }
    if (focus) {
      for (const auto& [text, first] : learnt) mark_focus(fmt, ex, text, first, focus_from, focus_to, token_bytes);
      for (const auto& [b, e] : ex.focus) d.focus_tokens += e - b;
      d.focus_examples += !ex.focus.empty();
    }
    d.tokens += n;
    d.target_tokens += target_count(ex);
    d.examples.push_back(std::move(ex));
  }
  if (in.bad()) return error{path + ": read error after line " + std::to_string(line_no)};
  d.hash = "fnv1a64:" + hex64(h);
  if (d.records == 0)
    return error{path + ": no records (expected JSON lines {\"prompt\": ..., \"completion\": ...} or "
                        "{\"prompt\": ..., \"turns\": [...]})"};
  if (d.examples.empty())
    return error{path + ": all " + std::to_string(d.records) + " records are longer than --max-len " +
                 std::to_string(max_len) + " tokens (the longest has " + std::to_string(d.longest_dropped) + ")"};
  return d;
}

data_split split_examples(std::size_t n, double val_fraction, std::uint64_t seed) {
  std::vector<std::size_t> perm(n);
  for (std::size_t i = 0; i < n; ++i) perm[i] = i;
  std::mt19937_64 rng(mix(seed ^ 0x76616c5f73706c74ull));  // "val_splt": its own stream
  shuffle(perm, rng);
  std::size_t n_val = 0;
  if (val_fraction > 0 && n >= 2)
    n_val = std::clamp<std::size_t>(static_cast<std::size_t>(std::llround(val_fraction * static_cast<double>(n))),
                                    1, n - 1);
  data_split s;
  s.val.assign(perm.begin(), perm.begin() + static_cast<std::ptrdiff_t>(n_val));
  s.train.assign(perm.begin() + static_cast<std::ptrdiff_t>(n_val), perm.end());
  std::sort(s.val.begin(), s.val.end());
  std::sort(s.train.begin(), s.train.end());
  return s;
}

std::vector<std::vector<std::size_t>> cut_by_tokens(const std::vector<std::size_t>& batch,
                                                    const std::vector<std::int64_t>& lengths,
                                                    std::int64_t budget) {
  std::vector<std::vector<std::size_t>> out;
  if (budget <= 0) {
    if (!batch.empty()) out.push_back(batch);
    return out;
  }
  std::int64_t longest = 0;
  for (auto i : batch) {
    const std::int64_t next = std::max(longest, lengths[i]);
    if (out.empty() || (static_cast<std::int64_t>(out.back().size()) + 1) * next > budget) {
      out.emplace_back();
      longest = lengths[i];
    } else {
      longest = next;
    }
    out.back().push_back(i);
  }
  return out;
}

std::vector<std::vector<std::size_t>> plan_epoch(const std::vector<std::size_t>& items,
                                                 const std::vector<std::int64_t>& lengths,
                                                 std::int64_t batch_size, std::int64_t batch_tokens,
                                                 std::uint64_t seed, std::int64_t epoch) {
  std::mt19937_64 rng(mix(mix(seed) + static_cast<std::uint64_t>(epoch)));
  std::vector<std::size_t> order = items;
  shuffle(order, rng);
  std::vector<std::vector<std::size_t>> batches;
  if (batch_tokens <= 0) {
    const auto bs = static_cast<std::size_t>(std::max<std::int64_t>(batch_size, 1));
    for (std::size_t i = 0; i < order.size(); i += bs)
      batches.emplace_back(order.begin() + static_cast<std::ptrdiff_t>(i),
                           order.begin() + static_cast<std::ptrdiff_t>(std::min(order.size(), i + bs)));
    return batches;
  }
  // Sorting all examples by length would make every batch's lengths alike but the batches' order
  // predictable (short ones first); sorting within shuffled windows keeps padding low while the
  // batch order is shuffled again below.
  constexpr std::size_t window = 1024;
  for (std::size_t w = 0; w < order.size(); w += window) {
    std::vector<std::size_t> part(order.begin() + static_cast<std::ptrdiff_t>(w),
                                  order.begin() + static_cast<std::ptrdiff_t>(std::min(order.size(), w + window)));
    std::stable_sort(part.begin(), part.end(), [&](std::size_t a, std::size_t b) { return lengths[a] < lengths[b]; });
    for (auto& b : cut_by_tokens(part, lengths, batch_tokens)) batches.push_back(std::move(b));
  }
  shuffle(batches, rng);
  return batches;
}

double lr_at(const pretrain_options& o, std::int64_t step, std::int64_t total) {
  const auto warm = static_cast<std::int64_t>(std::ceil(o.warmup_fraction * static_cast<double>(total)));
  if (step < warm) return o.lr * static_cast<double>(step + 1) / static_cast<double>(warm);
  const double span = static_cast<double>(std::max<std::int64_t>(total - warm - 1, 1));
  const double progress = std::clamp(static_cast<double>(step - warm) / span, 0.0, 1.0);
  const double low = o.lr * o.min_lr_ratio;
  return low + (o.lr - low) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

status check_output_dir(const pretrain_options& o) {
  std::error_code ec;
  const fs::path out(o.out);
  if (fs::exists(out, ec) && !o.overwrite)
    return error{o.out + ": already exists (choose another --out, or --overwrite to replace it)"};
  if (fs::exists(out, ec) && !fs::is_directory(out, ec)) return error{o.out + ": exists and is not a directory"};
  const fs::path tmp(o.out + ".tmp");
  const bool had_tmp = fs::exists(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) return error{o.out + ": cannot be written: creating " + tmp.string() + ": " + ec.message()};
  // Creating a directory can succeed where writing into it fails (a read-only bind mount, ...).
  const fs::path probe = tmp / ".probe";
  {
    std::ofstream f(probe, std::ios::binary | std::ios::trunc);
    f << "probe";
    f.flush();
    if (!f) {
      if (!had_tmp) fs::remove_all(tmp, ec);
      return error{o.out + ": cannot be written: no write access to " + tmp.string()};
    }
  }
  fs::remove(probe, ec);
  if (!had_tmp) fs::remove_all(tmp, ec);
  return {};
}

}  // namespace kforge::trainer

// kforge pretrain (trainer/pretrain.hpp, pretrain_command.hpp) on the fixture ChatML tokenizer
// (tests/model/fixtures/tokenizer, vocab 502) with a tiny model (hidden 64, 2 layers) on the CPU:
// the prompt is masked, the loss falls on a learnable corpus, the same seed gives the same bits,
// the written directory loads and generates as the engine sampler would use it, bad inputs exit 2
// and leave nothing behind. Multi-turn records are the sampler's episode context (prompt ids,
// completions with their end token, follow-up ids) with the prompt, observations and untrained
// turns masked.
#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../model/test_files.hpp"
#include "model/chat.hpp"
#include "model/generate.hpp"
#include "model/tokenizer.hpp"
#include "model/weights.hpp"
#include "stages/chat_tokens.hpp"
#include "trainer/pretrain.hpp"
#include "trainer/pretrain_command.hpp"
#include "tests/file_size_limit.hpp"
#include "tests/doctest_torch.hpp"  // last: after every header that may include LibTorch

using namespace kforge;
using namespace kforge::trainer;
using model::testing::read_text;
using model::testing::scratch_dir;
using model::testing::write_text;

namespace {

const std::string tokenizer_dir = std::string(KFORGE_MODEL_FIXTURES) + "/tokenizer";

/// 32 ops, each with its own body: the template (explanation, code fence) is shared and the body is
/// a fixed function of the op's name, so the corpus is learnable and partly memorised. Short, since
/// Debian's LibTorch runs on the reference BLAS (a few GFLOP/s).
std::vector<std::pair<std::string, std::string>> corpus() {
  const std::vector<std::pair<std::string, std::string>> ops{
      {"relu", "x > 0 ? x : 0"},   {"square", "x * x"},        {"double", "x + x"},      {"negate", "-x"},
      {"cube", "x * x * x"},       {"half", "x * 0.5f"},       {"inc", "x + 1"},         {"dec", "x - 1"},
      {"abs", "fabsf(x)"},         {"exp", "expf(x)"},         {"log", "logf(x)"},       {"sqrt", "sqrtf(x)"},
      {"sin", "sinf(x)"},          {"cos", "cosf(x)"},         {"tanh", "tanhf(x)"},     {"sign", "x > 0 ? 1 : -1"},
      {"clip", "fminf(x, 1)"},     {"floor", "floorf(x)"},     {"ceil", "ceilf(x)"},     {"recip", "1 / x"},
      {"zero", "0"},               {"one", "1"},               {"triple", "x * 3"},      {"swish", "x / (1 + expf(-x))"},
      {"step", "x > 0"},           {"erf", "erff(x)"},         {"round", "roundf(x)"},   {"rsqrt", "rsqrtf(x)"},
      {"gelu", "x * normcdff(x)"}, {"softplus", "log1pf(expf(x))"}, {"id", "x"},      {"quad", "x * x * x * x"}};
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [name, body] : ops)
    out.emplace_back("Kernel for " + name + ".", "Computes " + name + ".\n```cuda\ny[i] = " + body + ";\n```");
  return out;
}

void write_corpus(const std::string& path, const std::vector<std::pair<std::string, std::string>>& pairs) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  for (const auto& [p, c] : pairs) f << nlohmann::json{{"prompt", p}, {"completion", c}}.dump() << "\n";
}

pretrain_options tiny_options(const scratch_dir& dir, const std::string& out) {
  pretrain_options o;
  o.data = dir.path("data.jsonl");
  o.tokenizer_dir = tokenizer_dir;
  o.out = dir.path(out);
  o.hidden_size = 64;
  o.num_layers = 2;
  o.num_heads = 4;
  o.num_kv_heads = 2;
  o.intermediate_size = 128;
  o.max_positions = 256;
  o.max_len = 256;
  o.batch_size = 8;
  o.steps = 60;
  o.lr = 1e-2;
  o.val_fraction = 0.1;
  o.log_every = 10;
  o.eval_every = 30;
  o.seed = 5;
  o.device = "cpu";
  o.command = "test";
  return o;
}

sft_format fixture_format() {
  auto f = load_sft_format(tokenizer_dir);
  REQUIRE_MESSAGE(f.ok(), (f.ok() ? "" : f.message()));
  return std::move(*f);
}

struct command_run {
  int code = 0;
  std::string out, err;
};

command_run run_command(const pretrain_options& o) {
  std::ostringstream out, err;
  command_run r;
  r.code = pretrain_command(o, out, err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

}  // namespace

TEST_CASE("pretrain: an example is the chat-wrapped prompt, then the completion and <|im_end|>; only the latter are targets") {
  const sft_format f = fixture_format();
  CHECK(f.chat.style == model::chat_style::chatml);
  CHECK(f.eos == *f.tok.token_to_id("<|im_end|>"));
  CHECK(f.pad == *f.tok.token_to_id("<|endoftext|>"));

  const sft_example ex = tokenize_example(f, "Write a kernel for relu.", "It is max(x, 0).");
  const auto prompt = f.tok.encode(f.chat.wrap("Write a kernel for relu."), false);
  const auto completion = f.tok.encode("It is max(x, 0).", false);
  REQUIRE(ex.prompt_tokens == static_cast<std::int64_t>(prompt.size()));
  REQUIRE(ex.ids.size() == prompt.size() + completion.size() + 1);
  CHECK(std::equal(prompt.begin(), prompt.end(), ex.ids.begin()));
  CHECK(std::equal(completion.begin(), completion.end(), ex.ids.begin() + ex.prompt_tokens));
  CHECK(ex.ids.back() == f.eos);
  // The sampler's prompt ends by opening the assistant's turn.
  CHECK(f.tok.decode({ex.ids.begin(), ex.ids.begin() + ex.prompt_tokens}).substr(0, 12) == "<|im_start|>");

  const auto mask = target_mask(ex);
  REQUIRE(mask.size() == ex.ids.size());
  for (std::size_t i = 0; i < mask.size(); ++i) {
    CAPTURE(i);
    CHECK(mask[i] == (static_cast<std::int64_t>(i) >= ex.prompt_tokens ? 1 : 0));
  }
}

TEST_CASE("pretrain: the data file: records, dropped long examples, errors with line numbers") {
  scratch_dir dir;
  const sft_format f = fixture_format();
  const std::string path = dir.path("d.jsonl");

  write_text(path, "{\"prompt\": \"a\", \"completion\": \"b\"}\n\n{\"prompt\": \"c\", \"completion\": \"" +
                       std::string(300, 'x') + " y z\", \"extra\": 1}\n{\"prompt\": \"e\", \"completion\": \"\"}\n");
  auto d = read_sft_data(path, f, 40);
  REQUIRE_MESSAGE(d.ok(), (d.ok() ? "" : d.message()));
  CHECK(d->records == 3);
  CHECK(d->examples.size() == 2);
  CHECK(d->dropped_too_long == 1);
  CHECK(d->longest_dropped > 40);
  CHECK(d->hash.rfind("fnv1a64:", 0) == 0);
  CHECK(d->examples[1].ids.size() == static_cast<std::size_t>(d->examples[1].prompt_tokens) + 1);  // only eos

  // Focus spans: the tokens from "<<" to the end of the next ">>", found by the bytes the tokens
  // decode to, weigh focus_weight; the lead tokens weigh lead_weight; the rest 1.
  {
    write_text(path, "{\"prompt\": \"a\", \"completion\": \"head <<x y>> mid <<z>> <<open\"}\n");
    auto fd = read_sft_data(path, f, 60, "<<", ">>");
    REQUIRE_MESSAGE(fd.ok(), (fd.ok() ? "" : fd.message()));
    const sft_example& e = fd->examples.at(0);
    REQUIRE(e.focus.size() == 2);  // the third span never closes
    std::string marked;
    for (const auto& [b, en] : e.focus) {
      CHECK(b >= e.prompt_tokens);
      CHECK(en <= static_cast<std::int64_t>(e.ids.size()));
      marked += f.tok.decode({e.ids.begin() + b, e.ids.begin() + en}) + "|";
    }
    CHECK(marked.find("<<x y>>") != std::string::npos);
    CHECK(marked.find("<<z>>") != std::string::npos);
    CHECK(marked.find("head") == std::string::npos);
    CHECK(marked.find("open") == std::string::npos);
    CHECK(fd->focus_examples == 1);
    CHECK(fd->focus_tokens == (e.focus[0].second - e.focus[0].first) + (e.focus[1].second - e.focus[1].first));
    pretrain_options w;
    w.focus_from = "<<";
    w.focus_to = ">>";
    w.focus_weight = 5;
    w.lead_tokens = 1;
    w.lead_weight = 3;
    CHECK(target_weight(e, e.prompt_tokens, w) == 3);  // the first completion token: lead
    CHECK(target_weight(e, e.focus[0].first, w) == 5);
    CHECK(target_weight(e, e.focus[1].second - 1, w) == 5);
    CHECK(target_weight(e, static_cast<std::int64_t>(e.ids.size()) - 1, w) == 1);  // eos
    // Without markers nothing is marked.
    auto plain = read_sft_data(path, f, 60);
    REQUIRE(plain.ok());
    CHECK(plain->examples.at(0).focus.empty());
    CHECK(plain->examples.at(0).ids == e.ids);  // marking never changes the tokens
  }

  // --max-completion-tokens: the record whose completion (with its end token) is longer goes,
  // however short its prompt; a long prompt with a short completion stays.
  write_text(path, "{\"prompt\": \"a\", \"completion\": \"b c d e f g h\"}\n"
                   "{\"prompt\": \"a b c d e f g h i j\", \"completion\": \"b\"}\n");
  {
    auto all = read_sft_data(path, f, 60);
    REQUIRE(all.ok());
    CHECK(all->examples.size() == 2);
    const auto long_completion = static_cast<std::int64_t>(all->examples[0].ids.size()) - all->examples[0].prompt_tokens;
    const auto short_completion = static_cast<std::int64_t>(all->examples[1].ids.size()) - all->examples[1].prompt_tokens;
    REQUIRE(short_completion < long_completion);
    auto capped = read_sft_data(path, f, 60, "", "", long_completion - 1);
    REQUIRE(capped.ok());
    CHECK(capped->examples.size() == 1);
    CHECK(capped->examples[0].ids == all->examples[1].ids);
    CHECK(capped->dropped_long_completion == 1);
    CHECK(capped->longest_completion_dropped == long_completion);
    CHECK(capped->dropped_too_long == 0);
    CHECK(read_sft_data(path, f, 60, "", "", long_completion)->examples.size() == 2);
  }

  // A record marked prefix_only (a copy drill) learns its completion and no end of turn.
  write_text(path, "{\"prompt\": \"a\", \"completion\": \"b c\", \"prefix_only\": true}\n"
                   "{\"prompt\": \"a\", \"completion\": \"b c\", \"prefix_only\": false}\n");
  auto prefix = read_sft_data(path, f, 40);
  REQUIRE(prefix.ok());
  REQUIRE(prefix->examples.size() == 2);
  CHECK(prefix->examples[0].ids.size() + 1 == prefix->examples[1].ids.size());
  CHECK(prefix->examples[0].ids.back() != f.eos);
  CHECK(prefix->examples[1].ids.back() == f.eos);

  auto error_of = [&](const std::string& text) {
    write_text(path, text);
    auto r = read_sft_data(path, f, 40);
    REQUIRE_FALSE(r.ok());
    return r.message();
  };
  const std::string good = "{\"prompt\": \"a\", \"completion\": \"b\"}\n";
  CHECK(error_of(good + good + "{\"prompt\": \"a\", \"compl").find("d.jsonl:3: not valid JSON") != std::string::npos);
  CHECK(error_of(good + "{\"prompt\": \"a\"}\n").find("d.jsonl:2: no \"completion\"") != std::string::npos);
  CHECK(error_of("{\"prompt\": 1, \"completion\": \"b\"}\n").find(":1: \"prompt\" must be a string") !=
        std::string::npos);
  CHECK(error_of("[1, 2]\n").find(":1: not a JSON object") != std::string::npos);
  CHECK(error_of("{\"prompt\": \"a\", \"completion\": \"b\", \"prefix_only\": 1}\n")
            .find(":1: \"prefix_only\" must be true or false") != std::string::npos);
  CHECK(error_of("\n\n").find("no records") != std::string::npos);
  CHECK(error_of("{\"prompt\": \"a\", \"completion\": \"" + std::string(300, 'x') + " y\"}\n")
            .find("longer than --max-len 40") != std::string::npos);
  CHECK_FALSE(read_sft_data(dir.path("missing.jsonl"), f, 40).ok());
}

namespace {

/// The ids of `ex` inside [b, e).
std::vector<std::int64_t> slice(const sft_example& ex, std::int64_t b, std::int64_t e) {
  return {ex.ids.begin() + b, ex.ids.begin() + e};
}

std::vector<std::int64_t> widen(const std::vector<std::int32_t>& v) { return {v.begin(), v.end()}; }

}  // namespace

TEST_CASE("pretrain: a single-turn record keeps its ids and mask; a one-turn \"turns\" record is the same example") {
  const sft_format f = fixture_format();
  scratch_dir dir;
  const std::string path = dir.path("d.jsonl");
  const auto pairs = corpus();
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  for (const auto& [p, c] : pairs) {
    file << nlohmann::json{{"prompt", p}, {"completion", c}}.dump() << "\n";
    file << nlohmann::json{{"prompt", p}, {"turns", {{{"completion", c}}}}}.dump() << "\n";
  }
  file.close();
  auto d = read_sft_data(path, f, 256);
  REQUIRE_MESSAGE(d.ok(), (d.ok() ? "" : d.message()));
  REQUIRE(d->examples.size() == 2 * pairs.size());
  std::int64_t targets = 0;
  for (std::size_t k = 0; k < pairs.size(); ++k) {
    CAPTURE(k);
    const auto& [p, c] = pairs[k];
    const sft_example& single = d->examples[2 * k];
    const sft_example& one_turn = d->examples[2 * k + 1];
    // Single turn, as before multi-turn records existed: wrapped prompt, completion, eos; the
    // mask is 1 from prompt_tokens on.
    std::vector<std::int64_t> want = f.tok.encode(f.chat.wrap(p), f.chat.add_special_tokens());
    const auto prompt_tokens = static_cast<std::int64_t>(want.size());
    const auto completion = f.tok.encode(c, false);
    want.insert(want.end(), completion.begin(), completion.end());
    want.push_back(f.eos);
    CHECK(single.ids == want);
    CHECK(single.prompt_tokens == prompt_tokens);
    CHECK(single.turns.empty());
    std::vector<std::uint8_t> old_mask(want.size(), 0);
    for (std::size_t i = static_cast<std::size_t>(std::max<std::int64_t>(prompt_tokens, 1)); i < want.size(); ++i)
      old_mask[i] = 1;
    CHECK(target_mask(single) == old_mask);
    CHECK(target_count(single) == static_cast<std::int64_t>(want.size()) - prompt_tokens);
    CHECK(single.ids == tokenize_example(f, p, c).ids);
    // The same completion as the only turn of a multi-turn record.
    CHECK(one_turn.ids == single.ids);
    CHECK(one_turn.prompt_tokens == single.prompt_tokens);
    CHECK(target_mask(one_turn) == old_mask);
    targets += 2 * target_count(single);
  }
  CHECK(d->target_tokens == targets);
}

TEST_CASE("pretrain: a multi-turn record is the episode's context as the sampler builds it; only trained turns are targets") {
  const sft_format f = fixture_format();
  // The sampler's side: the openai backend's copy of engine_policy's prompt and follow-up ids, for
  // a model directory that is this tokenizer directory (its stop token: tokenizer_config's eos).
  auto policy = pipeline::chat_tokens::load(tokenizer_dir);
  REQUIRE_MESSAGE(policy.ok(), (policy.ok() ? "" : policy.message()));
  REQUIRE(policy->stops() == std::vector<std::int64_t>{f.eos});

  const std::string prompt = "Write a kernel for relu.";
  const std::vector<sft_turn> turns{{"y = x;", "Wrong: mismatch at element 3.", false},
                                    {"y = x > 0 ? x : 0; // v2", "Correct; 1.4x slower than torch.", true},
                                    {"y = fmaxf(x, 0);", std::nullopt, true}};
  const sft_example ex = tokenize_turns(f, prompt, turns);

  // The context the episode's third turn ends with: prompt ids, then per turn the sampled
  // completion (stopped at its end token) and the observation's follow-up ids.
  std::vector<std::int64_t> want = widen(policy->prompt_ids(prompt));
  const auto prompt_tokens = static_cast<std::int64_t>(want.size());
  std::vector<std::pair<std::int64_t, std::int64_t>> completions, observations;
  for (std::size_t k = 0; k < turns.size(); ++k) {
    const auto text = f.tok.encode(turns[k].completion, false);
    std::vector<std::int32_t> sampled(text.begin(), text.end());
    sampled.push_back(static_cast<std::int32_t>(policy->stops().front()));
    completions.emplace_back(want.size(), want.size() + sampled.size());
    want.insert(want.end(), sampled.begin(), sampled.end());
    if (!turns[k].observation) continue;
    const auto follow = widen(policy->follow_up_ids(*turns[k].observation, sampled));
    // The same ids straight from the chat format: the previous turn is closed by its end token.
    CHECK(follow == f.tok.encode(f.chat.follow_up(*turns[k].observation, true), false));
    observations.emplace_back(want.size(), want.size() + follow.size());
    want.insert(want.end(), follow.begin(), follow.end());
  }
  CHECK(ex.ids == want);
  CHECK(ex.prompt_tokens == prompt_tokens);
  // As text: ChatML turns, each assistant turn closed once.
  CHECK(f.tok.decode(ex.ids) ==
        "<|im_start|>user\nWrite a kernel for relu.<|im_end|>\n<|im_start|>assistant\n"
        "y = x;<|im_end|>\n<|im_start|>user\nWrong: mismatch at element 3.<|im_end|>\n<|im_start|>assistant\n"
        "y = x > 0 ? x : 0; // v2<|im_end|>\n<|im_start|>user\nCorrect; 1.4x slower than torch.<|im_end|>\n"
        "<|im_start|>assistant\ny = fmaxf(x, 0);<|im_end|>");

  REQUIRE(ex.turns.size() == 3);
  for (std::size_t k = 0; k < 3; ++k) {
    CHECK(ex.turns[k].begin == completions[k].first);
    CHECK(ex.turns[k].end == completions[k].second);
    CHECK(ex.turns[k].train == turns[k].train);
  }
  // The mask: 0 on the prompt, the observations and the untrained first turn; 1 on the rest.
  const auto mask = target_mask(ex);
  REQUIRE(mask.size() == ex.ids.size());
  auto inside = [](const std::vector<std::pair<std::int64_t, std::int64_t>>& spans, std::int64_t i) {
    return std::any_of(spans.begin(), spans.end(), [&](const auto& s) { return i >= s.first && i < s.second; });
  };
  std::int64_t ones = 0;
  for (std::int64_t i = 0; i < static_cast<std::int64_t>(mask.size()); ++i) {
    CAPTURE(i);
    const bool context = i < prompt_tokens || inside(observations, i) || inside({completions[0]}, i);
    CHECK(mask[static_cast<std::size_t>(i)] == (context ? 0 : 1));
    ones += mask[static_cast<std::size_t>(i)];
  }
  CHECK(ones == (completions[1].second - completions[1].first) + (completions[2].second - completions[2].first));
  CHECK(target_count(ex) == ones);
  CHECK(target_spans(ex) == std::vector<std::pair<std::int64_t, std::int64_t>>{completions[1], completions[2]});

  // Lead tokens count from each trained turn's start.
  pretrain_options w;
  w.lead_tokens = 1;
  w.lead_weight = 3;
  CHECK(target_weight(ex, completions[1].first, w) == 3);
  CHECK(target_weight(ex, completions[1].first + 1, w) == 1);
  CHECK(target_weight(ex, completions[2].first, w) == 3);
  CHECK(target_weight(ex, completions[2].second - 1, w) == 1);
}

TEST_CASE("pretrain: multi-turn records in the data file: counts, limits per turn, focus, errors") {
  scratch_dir dir;
  const sft_format f = fixture_format();
  const std::string path = dir.path("d.jsonl");
  auto record = [](const std::string& prompt, const nlohmann::json& turns) {
    return nlohmann::json{{"task_id", "relu"}, {"variant", 0}, {"drill", "repair"}, {"prompt", prompt}, {"turns", turns}}
               .dump() + "\n";
  };
  const std::string long_first = "a b c d e f g h i j k l m n o p";
  const std::string two_turns =
      record("p", {{{"completion", long_first}, {"observation", "wrong <<o>>"}, {"train", false}},
                   {{"completion", "x <<y>> z"}}});
  write_text(path, two_turns + "{\"prompt\": \"q\", \"completion\": \"r\"}\n");

  auto d = read_sft_data(path, f, 200, "<<", ">>");
  REQUIRE_MESSAGE(d.ok(), (d.ok() ? "" : d.message()));
  CHECK(d->records == 2);
  REQUIRE(d->examples.size() == 2);
  const sft_example& ex = d->examples[0];
  CHECK(ex.ids == tokenize_turns(f, "p", {{long_first, "wrong <<o>>", false}, {"x <<y>> z", std::nullopt, true}}).ids);
  CHECK(d->tokens == static_cast<std::int64_t>(ex.ids.size() + d->examples[1].ids.size()));
  CHECK(d->target_tokens == target_count(ex) + target_count(d->examples[1]));
  CHECK(target_count(ex) == ex.turns[1].end - ex.turns[1].begin);
  // Focus spans only inside trained turns: not in the observation, nor the untrained turn.
  REQUIRE(ex.focus.size() == 1);
  CHECK(ex.focus[0].first >= ex.turns[1].begin);
  CHECK(ex.focus[0].second <= ex.turns[1].end);
  CHECK(f.tok.decode(slice(ex, ex.focus[0].first, ex.focus[0].second)).find("<<y>>") != std::string::npos);
  CHECK(d->focus_examples == 1);

  // --max-len counts the whole context; --max-completion-tokens each turn, untrained ones too.
  const std::int64_t first_turn = ex.turns[0].end - ex.turns[0].begin;
  REQUIRE(first_turn > ex.turns[1].end - ex.turns[1].begin);
  {
    auto capped = read_sft_data(path, f, 200, "", "", first_turn - 1);
    REQUIRE(capped.ok());
    CHECK(capped->examples.size() == 1);
    CHECK(capped->dropped_long_completion == 1);
    CHECK(capped->longest_completion_dropped == first_turn);
    CHECK(read_sft_data(path, f, 200, "", "", first_turn)->examples.size() == 2);
    const auto n = static_cast<std::int64_t>(ex.ids.size());
    auto short_len = read_sft_data(path, f, n - 1);
    REQUIRE(short_len.ok());
    CHECK(short_len->dropped_too_long == 1);
    CHECK(short_len->longest_dropped == n);
  }

  auto error_of = [&](const std::string& text) {
    write_text(path, text);
    auto r = read_sft_data(path, f, 200);
    REQUIRE_FALSE(r.ok());
    return r.message();
  };
  const std::string good = "{\"prompt\": \"a\", \"completion\": \"b\"}\n";
  auto has = [](const std::string& message, const std::string& part) {
    CAPTURE(message);
    return message.find(part) != std::string::npos;
  };
  CHECK(has(error_of(good + record("p", nlohmann::json::array())),
            "d.jsonl:2: \"turns\" must be a non-empty array"));
  CHECK(has(error_of(record("p", "one turn")), "d.jsonl:1: \"turns\" must be a non-empty array"));
  CHECK(has(error_of(record("p", {{{"observation", "o"}}, {{"completion", "c"}}})),
            "d.jsonl:1: turn 1 of 2: no \"completion\""));
  CHECK(has(error_of(record("p", {{{"completion", "c"}, {"observation", "o"}}, {{"completion", 3}}})),
            "d.jsonl:1: turn 2 of 2: \"completion\" must be a string"));
  CHECK(has(error_of(record("p", {{{"completion", "c"}}, {{"completion", "d"}}})),
            "d.jsonl:1: turn 1 of 2: no \"observation\""));
  CHECK(has(error_of(record("p", {{{"completion", "c"}, {"observation", "o"}}})),
            "d.jsonl:1: turn 1 of 1: an \"observation\" on the last turn"));
  CHECK(has(error_of(record("p", {{{"completion", "c"}, {"observation", 1}}, {{"completion", "d"}}})),
            "turn 1 of 2: \"observation\" must be a string"));
  CHECK(has(error_of(record("p", {{{"completion", "c"}, {"train", "no"}}})), "turn 1 of 1: \"train\" must be true or false"));
  CHECK(has(error_of(record("p", {"c"})), "turn 1 of 1: not a JSON object"));
  CHECK(has(error_of(record("p", {{{"completion", "c"}, {"train", false}}})), "d.jsonl:1: no turn is trained"));
  CHECK(has(error_of("{\"prompt\": \"p\", \"completion\": \"c\", \"turns\": [{\"completion\": \"c\"}]}\n"),
            "d.jsonl:1: both \"completion\" and \"turns\""));
  CHECK(has(error_of("{\"prompt\": \"p\", \"prefix_only\": true, \"turns\": [{\"completion\": \"c\"}]}\n"),
            "d.jsonl:1: \"prefix_only\" with \"turns\""));
  CHECK(has(error_of("{\"turns\": [{\"completion\": \"c\"}]}\n"), "d.jsonl:1: no \"prompt\""));
  CHECK(has(error_of("{\"prompt\": 2, \"turns\": [{\"completion\": \"c\"}]}\n"), "d.jsonl:1: \"prompt\" must be a string"));
}

// Two optimiser steps on multi-turn records: the command accepts them and trains on the trained
// turns' tokens only.
TEST_CASE("pretrain: a run on multi-turn records trains on their trained turns") {
  scratch_dir dir;
  pretrain_options o = tiny_options(dir, "out");
  o.steps = 2;
  o.val_fraction = 0;
  o.log_every = 1;
  {
    std::ofstream file(o.data, std::ios::binary | std::ios::trunc);
    for (const auto& [p, c] : corpus())
      file << nlohmann::json{{"prompt", p},
                             {"turns", {{{"completion", "y[i] = x;"}, {"observation", "Wrong."}, {"train", false}},
                                        {{"completion", c}}}}}
                  .dump()
           << "\n";
  }
  const sft_format f = fixture_format();
  auto d = read_sft_data(o.data, f, o.max_len);
  REQUIRE(d.ok());
  const command_run r = run_command(o);
  INFO(r.out);
  INFO(r.err);
  REQUIRE(r.code == 0);
  const auto rec = nlohmann::json::parse(read_text(o.out + "/pretrain.json"));
  CHECK(rec["data"]["target_tokens"] == d->target_tokens);
  CHECK(rec["data"]["tokens"] == d->tokens);
  // Each logged step's targets (make_batch's) are the trained turns' tokens of its batch, as
  // the run plans its batches.
  std::vector<std::int64_t> lengths;
  for (const auto& e : d->examples) {
    lengths.push_back(static_cast<std::int64_t>(e.ids.size()));
    CHECK(target_count(e) == e.turns[1].end - e.turns[1].begin);
  }
  const auto plan = plan_epoch(split_examples(d->examples.size(), 0, o.seed).train, lengths, o.batch_size,
                               o.batch_tokens, o.seed, 0);
  std::istringstream log_lines(read_text(o.out + "/train_log.jsonl"));
  std::size_t step = 0;
  for (std::string line; std::getline(log_lines, line); ++step) {
    CAPTURE(step);
    REQUIRE(step < plan.size());
    std::int64_t want = 0;
    for (auto i : plan[step]) want += target_count(d->examples[i]);
    CHECK(nlohmann::json::parse(line)["target_tokens"].get<std::int64_t>() == want);
  }
  CHECK(step == 2);
}

TEST_CASE("pretrain: option checks name the flags") {
  scratch_dir dir;
  auto message = [&](auto edit) {
    pretrain_options o = tiny_options(dir, "out");
    edit(o);
    auto s = validate(o);
    return s.ok() ? std::string() : s.message();
  };
  CHECK(message([](pretrain_options&) {}).empty());
  CHECK(message([](pretrain_options& o) { o.num_heads = 5; }) == "--heads 5 does not divide --hidden 64");
  CHECK(message([](pretrain_options& o) { o.num_kv_heads = 3; }) == "--kv-heads 3 does not divide --heads 4");
  CHECK(message([](pretrain_options& o) { o.num_heads = 64; }).find("must be even") != std::string::npos);
  CHECK(message([](pretrain_options& o) { o.max_len = 512; }) == "--max-len 512 exceeds --max-positions 256");
  CHECK(message([](pretrain_options& o) { o.hidden_size = 0; }) == "--hidden 0: must be >= 1");
  CHECK(message([](pretrain_options& o) { o.max_completion_tokens = -1; }) ==
        "--max-completion-tokens -1: must be >= 0");
  CHECK(message([](pretrain_options& o) { o.val_fraction = 1; }).find("--val-fraction") == 0);
  CHECK(message([](pretrain_options& o) { o.device = "gpu"; }).find("--device 'gpu'") == 0);
  CHECK(message([](pretrain_options& o) { o.data.clear(); }).find("--data: missing") == 0);
  CHECK(message([](pretrain_options& o) { o.lead_weight = 0; }).find("--lead-weight") == 0);
  CHECK(message([](pretrain_options& o) { o.lead_tokens = -1; }).find("--lead-tokens -1") == 0);
  CHECK(message([](pretrain_options& o) { o.focus_from = "<<"; }).find("--focus-from and --focus-to") == 0);
  CHECK(message([](pretrain_options& o) {
          o.focus_from = "<<";
          o.focus_to = ">>";
          o.focus_weight = -1;
        }).find("--focus-weight") == 0);
}

TEST_CASE("pretrain: split, batches and schedule are deterministic and cover the data") {
  const data_split s = split_examples(50, 0.1, 7);
  CHECK(s.val.size() == 5);
  CHECK(s.train.size() == 45);
  std::set<std::size_t> all(s.train.begin(), s.train.end());
  all.insert(s.val.begin(), s.val.end());
  CHECK(all.size() == 50);
  CHECK(split_examples(50, 0.1, 7).val == s.val);
  CHECK(split_examples(50, 0.1, 8).val != s.val);
  CHECK(split_examples(1, 0.5, 7).val.empty());  // never everything held out

  std::vector<std::int64_t> lengths;
  for (int i = 0; i < 50; ++i) lengths.push_back(5 + (i * 37) % 60);
  for (std::int64_t budget : {0, 200}) {
    CAPTURE(budget);
    const auto plan = plan_epoch(s.train, lengths, 8, budget, 3, 0);
    CHECK(plan == plan_epoch(s.train, lengths, 8, budget, 3, 0));
    CHECK(plan != plan_epoch(s.train, lengths, 8, budget, 3, 1));  // reshuffled every epoch
    std::multiset<std::size_t> seen;
    for (const auto& b : plan) {
      seen.insert(b.begin(), b.end());
      std::int64_t longest = 0;
      for (auto i : b) longest = std::max(longest, lengths[i]);
      if (budget > 0) CHECK((static_cast<std::int64_t>(b.size()) * longest <= budget || b.size() == 1));
      else CHECK(b.size() <= 8);
    }
    CHECK(seen == std::multiset<std::size_t>(s.train.begin(), s.train.end()));
  }

  pretrain_options o;
  o.lr = 1.0;
  o.min_lr_ratio = 0.1;
  o.warmup_fraction = 0.1;
  CHECK(lr_at(o, 0, 100) == doctest::Approx(0.1));
  CHECK(lr_at(o, 9, 100) == doctest::Approx(1.0));
  CHECK(lr_at(o, 10, 100) == doctest::Approx(1.0));
  CHECK(lr_at(o, 99, 100) == doctest::Approx(0.1));
  CHECK(lr_at(o, 50, 100) < lr_at(o, 30, 100));
}

TEST_CASE("pretrain: bad inputs exit 2 with a message and write nothing") {
  scratch_dir dir;
  write_corpus(dir.path("data.jsonl"), corpus());
  auto expect_bad = [&](pretrain_options o, const std::string& needle) {
    const command_run r = run_command(o);
    CAPTURE(r.err);
    CHECK(r.code == 2);
    CHECK(r.err.find(needle) != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(o.out));
    CHECK_FALSE(std::filesystem::exists(o.out + ".tmp"));
  };
  pretrain_options o = tiny_options(dir, "out");

  auto missing = o;
  missing.data = dir.path("nope.jsonl");
  expect_bad(missing, "nope.jsonl: cannot read");

  write_text(dir.path("bad.jsonl"), "{\"prompt\": \"a\", \"completion\": \"b\"}\n{\"prompt\": \n");
  auto garbled = o;
  garbled.data = dir.path("bad.jsonl");
  expect_bad(garbled, "bad.jsonl:2: not valid JSON");

  std::filesystem::create_directories(dir.path("empty_tok"));
  write_text(dir.path("empty_tok/tokenizer_config.json"), "{}");
  auto no_tokenizer = o;
  no_tokenizer.tokenizer_dir = dir.path("empty_tok");
  expect_bad(no_tokenizer, "no tokenizer.json");

  write_text(dir.path("a_file"), "x");
  auto unwritable = o;
  unwritable.out = dir.path("a_file/sub/out");
  expect_bad(unwritable, "cannot be written");

  auto sizes = o;
  sizes.num_heads = 5;
  expect_bad(sizes, "--heads 5 does not divide --hidden 64");

  std::filesystem::create_directories(dir.path("taken"));
  auto exists = o;
  exists.out = dir.path("taken");
  const command_run r = run_command(exists);
  CHECK(r.code == 2);
  CHECK(r.err.find("already exists") != std::string::npos);
}

// A full disk (RLIMIT_FSIZE, below one train_log.jsonl line) stops the command at the first logged
// step, naming the file and the reason, and leaves no model behind.
TEST_CASE("pretrain: a train_log.jsonl the disk refuses fails the command, naming the file") {
  scratch_dir dir;
  write_corpus(dir.path("data.jsonl"), corpus());
  pretrain_options o = tiny_options(dir, "out");
  o.steps = 10;
  command_run r;
  {
    kforge::testing::file_size_limit limit(64);
    r = run_command(o);
  }
  INFO(r.err);
  CHECK(r.code == 1);
  CHECK(r.err.find("/train_log.jsonl: cannot write: File too large") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(o.out + "/model.safetensors"));
}

TEST_CASE("pretrain: the loss falls, the checkpoint loads and generates, the same seed gives the same weights") {
  scratch_dir dir;
  write_corpus(dir.path("data.jsonl"), corpus());
  const pretrain_options o = tiny_options(dir, "out");

  const command_run r = run_command(o);
  INFO(r.out);
  INFO(r.err);
  REQUIRE(r.code == 0);
  const std::string out = o.out;
  CHECK_FALSE(std::filesystem::exists(out + ".tmp"));
  for (const char* f : {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json",
                        "tokenizer_config.json", "pretrain.json", "train_log.jsonl"})
    CHECK_MESSAGE(std::filesystem::exists(out + "/" + f), f);

  const auto record = nlohmann::json::parse(read_text(out + "/pretrain.json"));
  const auto& t = record["training"];
  const double first = t["first_train_loss"].get<double>(), last = t["final_train_loss"].get<double>();
  MESSAGE("loss " << first << " -> " << last << ", validation " << t["final_val_loss"] << ", "
                  << t["tokens_per_second"].get<double>() << " tokens/s on the CPU");
  CHECK(first > 5.0);          // ~ln(512) at init
  CHECK(last < 0.35 * first);  // the template and most bodies are learnt
  CHECK(t["final_val_loss"].is_number());
  CHECK(t["steps"] == 60);
  CHECK(record["data"]["records"] == 32);
  CHECK(record["data"]["val_examples"] == 3);
  CHECK(record["data"]["hash"].get<std::string>().rfind("fnv1a64:", 0) == 0);
  CHECK(record["tokenizer"]["chat_format"] == "ChatML");
  CHECK(record["options"]["hidden_size"] == 64);
  CHECK(record["command"] == "test");
  std::istringstream log_lines(read_text(out + "/train_log.jsonl"));
  std::vector<nlohmann::json> log;
  for (std::string line; std::getline(log_lines, line);) log.push_back(nlohmann::json::parse(line));
  REQUIRE(log.size() == 6);  // every 10 steps
  CHECK(log.back()["step"] == 60);
  CHECK(log[2].contains("val_loss"));  // step 30
  CHECK(log.front()["loss"].get<double>() > log.back()["loss"].get<double>());

  // As the engine sampler loads it: config + weights, tokenizer, stop tokens, chat format.
  auto lm = model::load_causal_lm(out);
  REQUIRE_MESSAGE(lm.ok(), (lm.ok() ? "" : lm.message()));
  CHECK((*lm)->config.vocab_size == 512);
  CHECK((*lm)->config.tie_word_embeddings);
  auto tok = model::tokenizer::load(out);
  REQUIRE(tok.ok());
  auto defaults = model::load_generation_defaults(out, *tok);
  REQUIRE(defaults.ok());
  CHECK(defaults->stop_tokens == std::vector<std::int64_t>{2});
  auto chat = model::detect_chat_format(defaults->chat_template, *tok, defaults->bos_token, out);
  REQUIRE(chat.ok());
  CHECK(chat->style == model::chat_style::chatml);
  model::sampling_options so;
  so.temperature = 0;
  so.max_new_tokens = 80;
  so.stop_tokens = defaults->stop_tokens;
  const auto [prompt, completion] = corpus()[0];
  auto gens = model::generate(**lm, {tok->encode(chat->wrap(prompt), false)}, so, &*tok);
  REQUIRE_MESSAGE(gens.ok(), (gens.ok() ? "" : gens.message()));
  MESSAGE("greedy: " << (*gens)[0].text);
  CHECK((*gens)[0].text.rfind("Computes ", 0) == 0);  // the template is learnt

  // Same seed: the same bits (fp32 here, so that no rounding to bf16 could hide a difference);
  // another seed: other weights.
  auto short_run = [&](const std::string& name, std::uint64_t seed, std::int64_t lead_tokens = 0,
                       double lead_weight = 1.0, double focus_weight = 0) {
    pretrain_options s = tiny_options(dir, name);
    s.seed = seed;
    s.steps = 3;
    s.save_bf16 = false;
    s.lead_tokens = lead_tokens;
    s.lead_weight = lead_weight;
    if (focus_weight > 0) {  // the kernel line of each completion
      s.focus_from = "y[i] = ";
      s.focus_to = ";\n";
      s.focus_weight = focus_weight;
    }
    const command_run rr = run_command(s);
    REQUIRE_MESSAGE(rr.code == 0, rr.err);
    return read_text(s.out + "/model.safetensors");
  };
  const std::string a = short_run("a", 9), b = short_run("b", 9), c = short_run("other", 10);
  CHECK(a.size() > 4 * 100000);  // fp32
  CHECK(a == b);
  CHECK(a != c);
  // Lead-token weighting: weight 1 is the plain loss, bit for bit; weight 8 on the first 4
  // completion tokens trains other weights, while the logged loss stays the plain token mean (the
  // first step's loss is computed before any update, so it equals the unweighted run's).
  CHECK(short_run("lead1", 9, 4, 1.0) == a);
  CHECK(short_run("lead8", 9, 4, 8.0) != a);
  auto first_loss = [&](const std::string& name) {
    return nlohmann::json::parse(read_text(dir.path(name + "/pretrain.json")))["training"]["first_train_loss"].get<double>();
  };
  CHECK(first_loss("lead8") == doctest::Approx(first_loss("a")).epsilon(1e-6));  // summed in another order
  CHECK(nlohmann::json::parse(read_text(dir.path("lead8/pretrain.json")))["options"]["lead_weight"] == 8.0);
  // Focus spans likewise: weight 1 changes nothing, weight 8 trains other weights.
  CHECK(short_run("focus1", 9, 0, 1.0, 1.0) == a);
  const std::string focus8 = short_run("focus8", 9, 0, 1.0, 8.0);
  CHECK(focus8 != a);
  CHECK(focus8 != read_text(dir.path("lead8/model.safetensors")));
  CHECK(first_loss("focus8") == doctest::Approx(first_loss("a")).epsilon(1e-6));
  pretrain_options other = tiny_options(dir, "other");

  // --overwrite replaces a finished checkpoint.
  pretrain_options over = other;
  over.overwrite = true;
  over.steps = 1;
  REQUIRE(run_command(over).code == 0);
  CHECK(nlohmann::json::parse(read_text(dir.path("other/pretrain.json")))["training"]["steps"] == 1);
}

TEST_CASE("pretrain: --init goes on from a checkpoint: its shape and weights, a fresh schedule") {
  scratch_dir dir;
  write_corpus(dir.path("data.jsonl"), corpus());
  pretrain_options base = tiny_options(dir, "base");
  base.steps = 40;
  base.save_bf16 = false;  // so that the continued run starts from exactly these weights
  REQUIRE(run_command(base).code == 0);
  auto record = [&](const std::string& name) {
    return nlohmann::json::parse(read_text(dir.path(name + "/pretrain.json")));
  };

  // A near-zero learning rate: the continued run's validation loss is the base's; its first
  // training loss is a trained model's, far below a random init's.
  pretrain_options cont = tiny_options(dir, "cont");
  cont.init_from = base.out;
  cont.hidden_size = 32;  // ignored: the shape comes from the checkpoint
  cont.max_positions = 2;  // so are the positions: --max-len is checked against the checkpoint's
  cont.steps = 1;
  cont.lr = 1e-12;
  cont.save_bf16 = false;
  const command_run r = run_command(cont);
  INFO(r.err);
  REQUIRE(r.code == 0);
  const auto b = record("base"), c = record("cont");
  MESSAGE("base: loss " << b["training"]["first_train_loss"] << " -> " << b["training"]["final_train_loss"]
                        << ", val " << b["training"]["final_val_loss"] << "; continued: first loss "
                        << c["training"]["first_train_loss"] << ", val " << c["training"]["final_val_loss"]);
  CHECK(c["options"]["hidden_size"] == 64);
  CHECK(c["options"]["init_from"] == base.out);
  CHECK(c["model"]["parameters"] == b["model"]["parameters"]);
  CHECK(c["training"]["first_train_loss"].get<double>() < 0.5 * b["training"]["first_train_loss"].get<double>());
  CHECK(c["training"]["final_val_loss"].get<double>() ==
        doctest::Approx(b["training"]["final_val_loss"].get<double>()).epsilon(1e-4));

  // A shape flag beside --init is an error naming it; a directory without a checkpoint too.
  pretrain_options flagged = tiny_options(dir, "flagged");
  flagged.init_from = base.out;
  flagged.shape_flags = {"--hidden"};
  const command_run f = run_command(flagged);
  CHECK(f.code == 2);
  CHECK(f.err.find("--hidden with --init") != std::string::npos);
  pretrain_options missing = tiny_options(dir, "missing");
  missing.init_from = dir.path("nowhere");
  const command_run m = run_command(missing);
  CHECK(m.code == 2);
  CHECK(m.err.find("--init " + dir.path("nowhere")) != std::string::npos);
  pretrain_options longer = tiny_options(dir, "longer");
  longer.init_from = base.out;
  longer.max_len = base.max_positions + 1;
  const command_run l = run_command(longer);
  CHECK(l.code == 2);  // refused before the data is read
  CHECK(l.err.find("max_position_embeddings " + std::to_string(base.max_positions) + " is below --max-len") !=
        std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir.path("flagged")));
  CHECK_FALSE(std::filesystem::exists(dir.path("longer")));
  CHECK_FALSE(std::filesystem::exists(dir.path("missing")));
}

TEST_CASE("pretrain: on CUDA, bf16 compute with fp32 master weights learns as on the CPU") {
  auto device = resolve_device("auto");
  REQUIRE(device.ok());
  if (*device == "cpu") {
    MESSAGE("skipped: LibTorch sees no CUDA device");
    return;
  }
  scratch_dir dir;
  write_corpus(dir.path("data.jsonl"), corpus());
  pretrain_options o = tiny_options(dir, "out");
  o.device = "cuda";
  const command_run r = run_command(o);
  INFO(r.out);
  INFO(r.err);
  REQUIRE(r.code == 0);
  const auto t = nlohmann::json::parse(read_text(o.out + "/pretrain.json"))["training"];
  MESSAGE("cuda: loss " << t["first_train_loss"] << " -> " << t["final_train_loss"] << ", " << t["compute_dtype"]);
  CHECK(t["compute_dtype"].get<std::string>().find("bfloat16") == 0);
  CHECK(t["final_train_loss"].get<double>() < 0.35 * t["first_train_loss"].get<double>());

  model::load_options lo;
  lo.device = at::Device(*device);
  lo.dtype = at::kBFloat16;
  auto lm = model::load_causal_lm(o.out, lo);
  REQUIRE_MESSAGE(lm.ok(), (lm.ok() ? "" : lm.message()));
  auto tok = model::tokenizer::load(o.out);
  REQUIRE(tok.ok());
  const sft_format f = fixture_format();
  model::sampling_options so;
  so.temperature = 0;
  so.max_new_tokens = 40;
  so.stop_tokens = {f.eos};
  auto gens = model::generate(**lm, {tok->encode(f.chat.wrap(corpus()[0].first), false)}, so, &*tok);
  REQUIRE_MESSAGE(gens.ok(), (gens.ok() ? "" : gens.message()));
  MESSAGE("cuda greedy: " << (*gens)[0].text);
  CHECK((*gens)[0].text.rfind("Computes ", 0) == 0);
}

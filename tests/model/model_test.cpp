// The LibTorch half of the model tests (the only test TU including torch): logits and greedy
// generation against transformers' fixtures, the KV cache and padding against the plain forward,
// bad checkpoints, saving, sampling and the scoring pass.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "model/generate.hpp"
#include "model/weights.hpp"
#include "tests/model/test_files.hpp"
#include "tests/doctest_torch.hpp"  // last: after every header that may include LibTorch

using namespace kforge::model;
using namespace kforge::model::testing;
using json = nlohmann::json;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

CausalLM load(const std::string& name) {
  auto m = load_causal_lm(fixtures(name));
  REQUIRE_MESSAGE(m.ok(), (m.ok() ? "" : m.message()));
  return m.value();
}

at::Tensor fixture_tensor(const std::string& file, const std::string& name) {
  auto f = safetensors_file::open(fixtures(file));
  REQUIRE_MESSAGE(f.ok(), (f.ok() ? "" : f.message()));
  REQUIRE(f->find(name) != nullptr);
  auto t = to_tensor(*f->find(name));
  REQUIRE(t.ok());
  return t.value();
}

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<double>(); }

}  // namespace

TEST_CASE("model: logits match transformers (fp32, 1e-4)") {
  for (const std::string name : {"qwen2", "llama"}) {
    CAPTURE(name);
    CausalLM model = load(name);
    const at::Tensor ids = fixture_tensor(name + "_logits.safetensors", "input_ids");
    const at::Tensor expected = fixture_tensor(name + "_logits.safetensors", "logits");
    at::NoGradGuard no_grad;
    const at::Tensor logits = model->forward(ids);
    REQUIRE(logits.sizes() == expected.sizes());
    const double diff = max_abs_diff(logits, expected);
    MESSAGE(name << ": max |logits - transformers| = " << diff);
    CHECK(diff < 1e-4);
  }
}

TEST_CASE("model: the KV cache and left padding give the plain forward's logits") {
  CausalLM model = load("qwen2");
  const at::Tensor ids = fixture_tensor("qwen2_logits.safetensors", "input_ids");
  at::NoGradGuard no_grad;
  const at::Tensor full = model->forward(ids);
  const std::int64_t B = ids.size(0), T = ids.size(1);

  // Prefill 7 tokens, then one token at a time.
  kv_cache cache = make_kv_cache(model->config, B, T, at::TensorOptions().dtype(at::kFloat));
  std::vector<at::Tensor> parts{model->forward(ids.narrow(1, 0, 7), {{}, {}, &cache})};
  for (std::int64_t t = 7; t < T; ++t) parts.push_back(model->forward(ids.narrow(1, t, 1), {{}, {}, &cache}));
  CHECK(cache.length == T);
  CHECK(max_abs_diff(at::cat(parts, 1), full) < 1e-5);

  // Row 1 left-padded by 5: its logits at the real positions are unchanged.
  const std::int64_t pad = 5;
  at::Tensor padded = at::zeros({B, T + pad}, ids.options());
  at::Tensor mask = at::zeros({B, T + pad}, ids.options());
  padded.select(0, 0).narrow(0, 0, T).copy_(ids.select(0, 0));
  mask.select(0, 0).narrow(0, 0, T).fill_(1);
  padded.select(0, 1).narrow(0, pad, T).copy_(ids.select(0, 1));
  mask.select(0, 1).narrow(0, pad, T).fill_(1);
  forward_args args;
  args.attention_mask = mask;
  const at::Tensor out = model->forward(padded, args);
  CHECK(max_abs_diff(out.select(0, 1).narrow(0, pad, T), full.select(0, 1)) < 1e-5);
  CHECK(max_abs_diff(out.select(0, 0).narrow(0, 0, T), full.select(0, 0)) < 1e-5);
  CHECK_FALSE(at::isnan(out).any().item<bool>());
}

TEST_CASE("model: save_checkpoint and save_weights round-trip, bf16 included") {
  CausalLM model = load("qwen2");
  scratch_dir dir;
  REQUIRE(save_checkpoint(*model, dir.path("ckpt"), fixtures("qwen2")).ok());
  CHECK(std::filesystem::exists(dir.path("ckpt/generation_config.json")));
  CHECK(save_checkpoint(*model, dir.path("ckpt"), dir.path("ckpt")).ok());  // over itself
  std::filesystem::create_directories(dir.path("sharded"));
  write_text(dir.path("sharded/model.safetensors.index.json"), "{}");
  auto refused = save_checkpoint(*model, dir.path("sharded"), fixtures("qwen2"));
  REQUIRE_FALSE(refused.ok());
  CHECK(contains(refused.message(), "sharded checkpoint"));
  std::filesystem::copy(fixtures("qwen2/config.json"), dir.path("config.json"));
  CausalLM again = load_causal_lm(dir.path("ckpt")).value();
  const at::Tensor ids = fixture_tensor("qwen2_logits.safetensors", "input_ids");
  at::NoGradGuard no_grad;
  CHECK(max_abs_diff(model->forward(ids), again->forward(ids)) == 0.0);

  model->to(at::kBFloat16);
  REQUIRE(save_weights(*model, dir.path("model.safetensors")).ok());
  auto f = safetensors_file::open(dir.path("model.safetensors"));
  REQUIRE(f.ok());
  CHECK(f->find("model.embed_tokens.weight")->dtype == st_dtype::bf16);
  auto bf = load_causal_lm(dir.path(), {at::kBFloat16, at::kCPU});
  REQUIRE(bf.ok());
  CHECK((bf.value()->output_weight().scalar_type() == at::kBFloat16));  // ScalarType has no doctest printer
  const at::Tensor lbf = bf.value()->forward(ids).to(at::kFloat);
  CHECK_FALSE(at::isnan(lbf).any().item<bool>());
  // bf16 keeps ~3 significant digits: close to fp32, not equal.
  const double mean_diff = (lbf - again->forward(ids)).abs().mean().item<double>();
  MESSAGE("bf16 vs fp32 logits: mean |diff| = " << mean_diff);
  CHECK(mean_diff < 0.1);
}

TEST_CASE("model: bad checkpoints give errors naming the tensor") {
  namespace fs = std::filesystem;
  scratch_dir dir;
  fs::copy(fixtures("qwen2/config.json"), dir.path("config.json"));
  auto src = safetensors_file::open(fixtures("qwen2/model.safetensors"));
  REQUIRE(src.ok());
  auto write_without = [&](const std::string& skip, const std::string& reshape) {
    std::vector<tensor_bytes> out;
    for (const auto& t : src->tensors()) {
      if (t.name == skip) continue;
      tensor_bytes b{t.name, t.dtype, t.shape, t.data, t.nbytes};
      if (t.name == reshape) {
        b.shape = {t.shape[0] * t.shape[1]};
      }
      out.push_back(b);
    }
    REQUIRE(write_safetensors(dir.path("model.safetensors"), out).ok());
  };

  write_without("model.layers.1.self_attn.k_proj.bias", "");
  auto missing = load_causal_lm(dir.path());
  REQUIRE_FALSE(missing.ok());
  CHECK(contains(missing.message(), "missing tensor 'model.layers.1.self_attn.k_proj.bias'"));
  CHECK(contains(missing.message(), "expected shape [32]"));

  write_without("", "model.layers.0.mlp.up_proj.weight");
  auto shape = load_causal_lm(dir.path());
  REQUIRE_FALSE(shape.ok());
  CHECK(contains(shape.message(), "tensor 'model.layers.0.mlp.up_proj.weight' has shape [8192], expected [128, 64]"));
  CHECK(contains(shape.message(), "model.safetensors"));

  const std::string full = read_text(fixtures("qwen2/model.safetensors"));
  write_text(dir.path("model.safetensors"), full.substr(0, full.size() / 2));
  auto truncated = load_causal_lm(dir.path());
  REQUIRE_FALSE(truncated.ok());
  CHECK(contains(truncated.message(), "truncated"));

  write_text(dir.path("model.safetensors"), full);
  write_text(dir.path("config.json"), "{\"architectures\": [\"Qwen2ForCausalLM\"], ");
  auto bad_json = load_causal_lm(dir.path());
  REQUIRE_FALSE(bad_json.ok());
  CHECK(contains(bad_json.message(), "config.json: not valid JSON"));

  // A Llama config over Qwen2 weights: the biases are tensors the model does not have.
  fs::copy(fixtures("llama/config.json"), dir.path("config.json"), fs::copy_options::overwrite_existing);
  auto wrong_arch = load_causal_lm(dir.path());
  REQUIRE_FALSE(wrong_arch.ok());
  CHECK(contains(wrong_arch.message(), "model.safetensors"));

  // Everything is checked before anything is copied: a file that fails (here, for a tensor the
  // model lacks, found only after all of its own) leaves the model's weights as they were.
  CausalLM model = load("qwen2");
  std::vector<at::Tensor> before;
  for (const auto& p : model->parameters()) before.push_back(p.detach().clone());
  std::vector<std::vector<float>> shifted;
  std::vector<tensor_bytes> entries;
  for (const auto& t : src->tensors()) {
    REQUIRE(t.dtype == st_dtype::f32);
    shifted.emplace_back(t.nbytes / 4);
    std::memcpy(shifted.back().data(), t.data, t.nbytes);
    for (auto& x : shifted.back()) x += 1.0f;
    entries.push_back({t.name, t.dtype, t.shape, shifted.back().data(), t.nbytes});
  }
  const float extra[2] = {1, 2};
  entries.push_back({"zz.extra", st_dtype::f32, {2}, extra, sizeof extra});
  REQUIRE(write_safetensors(dir.path("shifted.safetensors"), entries).ok());
  auto tensors = checkpoint_tensors::open(dir.path("shifted.safetensors"));
  REQUIRE(tensors.ok());
  auto failed = load_weights(*model, *tensors);
  REQUIRE_FALSE(failed.ok());
  CHECK(contains(failed.message(), "does not have: 'zz.extra'"));
  const auto params = model->parameters();
  for (std::size_t i = 0; i < params.size(); ++i) CHECK(at::equal(params[i], before[i]));
}

TEST_CASE("generate: greedy equals transformers token for token, prompts batched and padded") {
  const json greedy = json::parse(read_text(fixtures("greedy.json")));
  for (const std::string name : {"qwen2", "llama"}) {
    CAPTURE(name);
    CausalLM model = load(name);
    const auto prompts = greedy[name]["prompts"].get<std::vector<std::vector<std::int64_t>>>();
    const auto expected = greedy[name]["outputs"].get<std::vector<std::vector<std::int64_t>>>();
    sampling_options o;
    o.temperature = 0;
    o.max_new_tokens = greedy[name]["max_new_tokens"].get<std::int64_t>();
    auto out = generate(*model, prompts, o);
    REQUIRE_MESSAGE(out.ok(), (out.ok() ? "" : out.message()));
    REQUIRE(out->size() == prompts.size());
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      CAPTURE(i);
      CHECK((*out)[i].tokens == expected[i]);
      CHECK((*out)[i].logprobs.size() == expected[i].size());
      CHECK_FALSE((*out)[i].stopped);
    }
    // One prompt alone gives the same tokens as in the padded batch.
    auto alone = generate(*model, {prompts[1]}, o);
    REQUIRE(alone.ok());
    CHECK((*alone)[0].tokens == expected[1]);
    // Prefilled in slices of 1 and of 3 positions (as a long batch of episode turns is, the last
    // slice shorter): the same tokens, and log-probs up to the rounding of the other shapes.
    std::size_t longest = 0;
    for (const auto& p : prompts) longest = std::max(longest, p.size());
    const double per_position = static_cast<double>(prompts.size() * longest) *
                                static_cast<double>(attention_bytes_per_pair(model->config, at::kFloat, false));
    REQUIRE(longest % 3 != 0);
    for (const double positions : {1.0, 3.0}) {
      CAPTURE(positions);
      o.prefill_scratch_bytes = positions * per_position;
      auto sliced = generate(*model, prompts, o);
      REQUIRE(sliced.ok());
      for (std::size_t i = 0; i < prompts.size(); ++i) {
        CAPTURE(i);
        CHECK((*sliced)[i].tokens == expected[i]);
        REQUIRE((*sliced)[i].logprobs.size() == (*out)[i].logprobs.size());
        for (std::size_t t = 0; t < (*out)[i].logprobs.size(); ++t)
          CHECK((*sliced)[i].logprobs[t] == doctest::Approx((*out)[i].logprobs[t]).epsilon(1e-4));
      }
    }
  }
}

TEST_CASE("generate: sampling options, stop tokens, the processor hook, and scoring equals generation") {
  CausalLM model = load("qwen2");
  const std::vector<std::vector<std::int64_t>> prompts{{5, 17, 300, 42}, {1}, {100, 200, 300}};
  sampling_options o;
  o.n = 3;
  o.temperature = 0.8;
  o.top_p = 0.9;
  o.top_k = 50;
  o.max_new_tokens = 12;
  o.seed = 1234;
  auto a = generate(*model, prompts, o);
  REQUIRE_MESSAGE(a.ok(), (a.ok() ? "" : a.message()));
  REQUIRE(a->size() == 9);
  auto b = generate(*model, prompts, o);
  REQUIRE(b.ok());
  bool all_same = true, any_differ = false;
  for (std::size_t i = 0; i < 9; ++i) {
    all_same = all_same && (*a)[i].tokens == (*b)[i].tokens;  // same seed, same samples
    if (i % 3 != 0 && (*a)[i].tokens != (*a)[i - 1].tokens) any_differ = true;
    CHECK((*a)[i].prompt == i / 3);
    CHECK((*a)[i].sample == i % 3);
    for (float lp : (*a)[i].logprobs) CHECK(lp <= 0.0f);
  }
  CHECK(all_same);
  CHECK(any_differ);  // samples of one prompt are not all equal

  // Stop tokens: one token of each sample (at steps 1..6), so that every sample stops, at different
  // steps; the stop token and its log-prob are returned.
  std::vector<std::int64_t> stops;
  for (std::size_t i = 0; i < 9; ++i) stops.push_back((*a)[i].tokens[1 + i % 6]);
  sampling_options os = o;
  os.stop_tokens = stops;
  auto c = generate(*model, prompts, os);
  REQUIRE(c.ok());
  auto is_stop = [&](std::int64_t t) { return std::find(stops.begin(), stops.end(), t) != stops.end(); };
  // Every sample is the unstopped one cut after its first stop token: rows that stop leave the
  // batch without changing the others' samples.
  int stopped = 0;
  for (std::size_t i = 0; i < c->size(); ++i) {
    const auto& g = (*c)[i];
    const auto& full = (*a)[i];
    auto cut = std::find_if(full.tokens.begin(), full.tokens.end(), is_stop);
    const std::vector<std::int64_t> want(full.tokens.begin(), cut == full.tokens.end() ? cut : cut + 1);
    CHECK(g.tokens == want);
    CHECK(g.stopped);
    CHECK(g.tokens.size() <= 1 + 1 + i % 6);
    stopped += g.stopped;
    REQUIRE(g.tokens.size() == g.logprobs.size());
    for (std::size_t t = 0; t < g.tokens.size() && t < full.logprobs.size(); ++t)
      CHECK(std::abs(g.logprobs[t] - full.logprobs[t]) < 1e-5);
  }
  CHECK(stopped == 9);

  // top_k = 1 is greedy.
  sampling_options ok1 = o;
  ok1.top_k = 1;
  sampling_options og;
  og.temperature = 0;
  og.max_new_tokens = 12;
  auto k1 = generate(*model, prompts, ok1);
  auto g0 = generate(*model, prompts, og);
  REQUIRE(k1.ok());
  REQUIRE(g0.ok());
  for (std::size_t i = 0; i < 9; ++i) CHECK((*k1)[i].tokens == (*g0)[i / 3].tokens);

  // The processor hook can forbid tokens: forbid every even id.
  sampling_options op = o;
  int calls = 0;
  op.processor = [&](at::Tensor& logits, const at::Tensor& generated, const at::Tensor& rows, std::int64_t step) {
    CHECK(generated.size(1) == step);
    CHECK(rows.size(0) == logits.size(0));
    ++calls;
    logits.index_fill_(-1, at::arange(0, logits.size(-1), 2, at::TensorOptions().dtype(at::kLong)),
                       -std::numeric_limits<float>::infinity());
  };
  auto p = generate(*model, prompts, op);
  REQUIRE(p.ok());
  CHECK(calls == 12);
  for (const auto& g : *p)
    for (auto t : g.tokens) CHECK(t % 2 == 1);

  // Scoring the sampled completions gives generation's log-probs, in micro-batches of 2, with grad.
  std::vector<score_item> items;
  for (const auto& g : *c) items.push_back({prompts[g.prompt], g.tokens});
  score_options so;
  so.temperature = o.temperature;
  so.micro_batch = 2;
  std::size_t seen = 0;
  double worst = 0;
  auto s = score(*model, items, so, [&](std::size_t first, const scored_batch& batch) {
    CHECK(batch.logprobs.requires_grad());
    for (std::int64_t r = 0; r < batch.logprobs.size(0); ++r) {
      const auto& g = (*c)[first + static_cast<std::size_t>(r)];
      for (std::size_t t = 0; t < g.tokens.size(); ++t) {
        CHECK(batch.mask[r][static_cast<std::int64_t>(t)].item<float>() == 1.0f);
        worst = std::max(worst, std::abs(batch.logprobs[r][static_cast<std::int64_t>(t)].item<double>() - g.logprobs[t]));
      }
      for (auto t = static_cast<std::int64_t>(g.tokens.size()); t < batch.mask.size(1); ++t)
        CHECK(batch.mask[r][t].item<float>() == 0.0f);
    }
    (batch.logprobs.sum()).backward();
    seen += static_cast<std::size_t>(batch.logprobs.size(0));
  });
  REQUIRE_MESSAGE(s.ok(), (s.ok() ? "" : s.message()));
  CHECK(seen == items.size());
  MESSAGE("max |score - generation log-prob| = " << worst);
  CHECK(worst < 1e-4);
  CHECK(model->model->embed_tokens->weight.grad().defined());
}

TEST_CASE("generate: prompt seeds make a batched call give each prompt's own samples") {
  CausalLM model = load("qwen2");
  const std::vector<std::vector<std::int64_t>> prompts{{5, 17, 300, 42}, {1}, {100, 200, 300}};
  sampling_options o;
  o.n = 3;
  o.temperature = 0.9;
  o.max_new_tokens = 10;
  o.prompt_seeds = {101, 202, 303};
  auto batched = generate(*model, prompts, o);
  REQUIRE_MESSAGE(batched.ok(), (batched.ok() ? "" : batched.message()));
  REQUIRE(batched->size() == 9);
  for (std::size_t p = 0; p < prompts.size(); ++p) {
    sampling_options one = o;
    one.prompt_seeds.clear();
    one.seed = o.prompt_seeds[p];
    auto alone = generate(*model, {prompts[p]}, one);
    REQUIRE(alone.ok());
    for (std::size_t i = 0; i < 3; ++i) {
      const auto& b = (*batched)[p * 3 + i];
      CHECK(b.prompt == p);
      CHECK(b.tokens == (*alone)[i].tokens);  // the same draws; fp32 padding changes no argmax here
    }
  }
  sampling_options bad = o;
  bad.prompt_seeds = {1, 2};
  auto e = generate(*model, prompts, bad);
  REQUIRE_FALSE(e.ok());
  CHECK(e.message().find("2 prompt seeds for 3 prompts") != std::string::npos);
}

TEST_CASE("generate: per-prompt sample counts batch groups with single continuations") {
  // A sampler generates a new group (n = 3 here) and episodes' next turns (n = 1) in one call; each
  // prompt must still get the samples it gets alone, with its own count and seed.
  CausalLM model = load("qwen2");
  const std::vector<std::vector<std::int64_t>> prompts{{5, 17, 300, 42}, {1}, {100, 200, 300, 7, 9, 11}};
  sampling_options o;
  o.temperature = 0.9;
  o.max_new_tokens = 10;
  o.stop_tokens = {42};
  o.prompt_n = {3, 1, 2};
  o.prompt_seeds = {101, 202, 303};
  auto mixed = generate(*model, prompts, o);
  REQUIRE_MESSAGE(mixed.ok(), (mixed.ok() ? "" : mixed.message()));
  REQUIRE(mixed->size() == 6);
  std::size_t row = 0;
  for (std::size_t p = 0; p < prompts.size(); ++p) {
    sampling_options one = o;
    one.prompt_n.clear();
    one.prompt_seeds.clear();
    one.n = o.prompt_n[p];
    one.seed = o.prompt_seeds[p];
    auto alone = generate(*model, {prompts[p]}, one);
    REQUIRE(alone.ok());
    REQUIRE(alone->size() == static_cast<std::size_t>(one.n));
    for (std::size_t i = 0; i < alone->size(); ++i, ++row) {
      const auto& m = (*mixed)[row];
      CHECK(m.prompt == p);
      CHECK(m.sample == i);
      CHECK(m.tokens == (*alone)[i].tokens);
    }
  }
  sampling_options bad = o;
  bad.prompt_n = {3, 1};
  auto e = generate(*model, prompts, bad);
  REQUIRE_FALSE(e.ok());
  CHECK(e.message().find("2 sample counts for 3 prompts") != std::string::npos);
  bad.prompt_n = {3, 0, 1};
  e = generate(*model, prompts, bad);
  REQUIRE_FALSE(e.ok());
  CHECK(e.message().find("prompt 1's sample count must be at least 1") != std::string::npos);
}

TEST_CASE("generate: how often the host checks for stops changes nothing but the waste") {
  // The GPU default checks every 8 steps; rows that stopped in between keep computing tokens that
  // must not leak into the results, and dropping rows later must not change the others.
  CausalLM model = load("qwen2");
  const std::vector<std::vector<std::int64_t>> prompts{{5, 17, 300, 42}, {1}, {100, 200, 300, 7}};
  sampling_options o;
  o.n = 4;
  o.temperature = 0.7;
  o.max_new_tokens = 24;
  o.seed = 7;
  o.stop_tokens = {3, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25};
  o.check_stops_every = 1;
  auto every = generate(*model, prompts, o);
  REQUIRE(every.ok());
  int stopped = 0;
  for (const std::int64_t k : {3, 8, 100}) {
    CAPTURE(k);
    o.check_stops_every = k;
    auto r = generate(*model, prompts, o);
    REQUIRE(r.ok());
    REQUIRE(r->size() == every->size());
    for (std::size_t i = 0; i < r->size(); ++i) {
      CHECK((*r)[i].tokens == (*every)[i].tokens);
      CHECK((*r)[i].stopped == (*every)[i].stopped);
      REQUIRE((*r)[i].logprobs.size() == (*every)[i].logprobs.size());
      for (std::size_t t = 0; t < (*r)[i].logprobs.size(); ++t)
        CHECK(std::abs((*r)[i].logprobs[t] - (*every)[i].logprobs[t]) < 1e-5);
      stopped += (*r)[i].stopped;
    }
  }
  CHECK(stopped > 0);                    // some rows stopped early ...
  CHECK(stopped < 3 * 12);               // ... and some ran to max_new_tokens
  o.check_stops_every = -1;
  CHECK_FALSE(generate(*model, prompts, o).ok());
}

TEST_CASE("generate: device_use brackets the device work, window by window, and changes nothing") {
  CausalLM model = load("qwen2");
  const std::vector<std::vector<std::int64_t>> prompts{{5, 17, 300, 42}, {100, 200, 300, 7}};
  sampling_options o;
  o.n = 2;
  o.temperature = 0.7;
  o.max_new_tokens = 20;
  o.seed = 3;
  o.stop_tokens = {3};
  o.check_stops_every = 4;
  auto plain = generate(*model, prompts, o);
  REQUIRE(plain.ok());
  std::vector<bool> calls;
  o.device_use = [&](bool in_use) { calls.push_back(in_use); };
  auto bracketed = generate(*model, prompts, o);
  REQUIRE(bracketed.ok());
  REQUIRE(bracketed->size() == plain->size());
  for (std::size_t i = 0; i < plain->size(); ++i) CHECK((*bracketed)[i].tokens == (*plain)[i].tokens);
  // true, false, true, false, ...: the prefill with the first window, then one window per check
  // for stops (every 4 of up to 20 steps), released at the end.
  REQUIRE(calls.size() >= 4);
  CHECK(calls.size() % 2 == 0);
  for (std::size_t i = 0; i < calls.size(); ++i) CHECK(calls[i] == (i % 2 == 0));
  CHECK(calls.size() <= 2 * (1 + 20 / 4));
}

TEST_CASE("generate: bad requests are errors") {
  CausalLM model = load("llama");
  sampling_options o;
  CHECK_FALSE(generate(*model, {}, o).ok());
  CHECK_FALSE(generate(*model, {{}}, o).ok());
  auto big = generate(*model, {{1, 512}}, o);
  REQUIRE_FALSE(big.ok());
  CHECK(contains(big.message(), "token 512"));
  o.top_p = 0;
  CHECK_FALSE(generate(*model, {{1}}, o).ok());
  CHECK_FALSE(score_batch(*model, {{{}, {1}}}, {}).ok());
}

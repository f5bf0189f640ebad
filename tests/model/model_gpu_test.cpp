// On a GPU: the fixture models on CUDA agree with transformers' CPU logits (fp32, 1e-4), greedy
// generation is token-for-token the same, scoring equals generation's log-probs, and the bf16 model
// (the sampler's setting) stays close to fp32. Exits 77 (skipped) without a CUDA device.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <torch/cuda.h>

#include "model/generate.hpp"
#include "model/weights.hpp"
#include "tests/model/test_files.hpp"
#include "tests/doctest_torch.hpp"  // last: after every header that may include LibTorch

using namespace kforge::model;
using namespace kforge::model::testing;
using json = nlohmann::json;

namespace {

void require_gpu() {
  if (!torch::cuda::is_available()) {
    std::printf("SKIP: no CUDA device visible (GPU tests run on the GPU host: deploy/gpu-host.sh)\n");
    std::exit(77);
  }
}

at::Tensor fixture_tensor(const std::string& file, const std::string& name) {
  auto f = safetensors_file::open(fixtures(file));
  REQUIRE_MESSAGE(f.ok(), (f.ok() ? "" : f.message()));
  REQUIRE(f->find(name) != nullptr);
  return to_tensor(*f->find(name)).value();
}

CausalLM load_on(const std::string& name, at::ScalarType dtype) {
  auto m = load_causal_lm(fixtures(name), {dtype, at::Device(at::kCUDA, 0)});
  REQUIRE_MESSAGE(m.ok(), (m.ok() ? "" : m.message()));
  return m.value();
}

}  // namespace

TEST_CASE("model on CUDA: logits and greedy generation equal transformers (fp32)") {
  require_gpu();
  const json greedy = json::parse(read_text(fixtures("greedy.json")));
  for (const std::string name : {"qwen2", "llama"}) {
    CAPTURE(name);
    CausalLM model = load_on(name, at::kFloat);
    const at::Tensor ids = fixture_tensor(name + "_logits.safetensors", "input_ids");
    const at::Tensor expected = fixture_tensor(name + "_logits.safetensors", "logits");
    at::NoGradGuard no_grad;
    const double diff = (model->forward(ids.cuda()).cpu() - expected).abs().max().item<double>();
    MESSAGE(name << " on CUDA: max |logits - transformers| = " << diff);
    CHECK(diff < 1e-4);

    sampling_options o;
    o.temperature = 0;
    o.max_new_tokens = greedy[name]["max_new_tokens"].get<std::int64_t>();
    auto out = generate(*model, greedy[name]["prompts"].get<std::vector<std::vector<std::int64_t>>>(), o);
    REQUIRE_MESSAGE(out.ok(), (out.ok() ? "" : out.message()));
    const auto want = greedy[name]["outputs"].get<std::vector<std::vector<std::int64_t>>>();
    for (std::size_t i = 0; i < want.size(); ++i) CHECK((*out)[i].tokens == want[i]);
  }
}

TEST_CASE("model on CUDA: scoring equals generation; bf16 close to fp32") {
  require_gpu();
  CausalLM model = load_on("qwen2", at::kFloat);
  const std::vector<std::vector<std::int64_t>> prompts{{5, 17, 300, 42}, {1}, {100, 200, 300}};
  sampling_options o;
  o.n = 4;
  o.temperature = 0.8;
  o.top_p = 0.95;
  o.max_new_tokens = 24;
  o.seed = 7;
  auto gens = generate(*model, prompts, o);
  REQUIRE(gens.ok());
  std::vector<score_item> items;
  for (const auto& g : *gens) items.push_back({prompts[g.prompt], g.tokens});
  score_options so;
  so.temperature = o.temperature;
  so.micro_batch = 5;
  double worst = 0;
  auto s = score(*model, items, so, [&](std::size_t first, const scored_batch& b) {
    const at::Tensor lp = b.logprobs.detach().cpu();
    for (std::int64_t r = 0; r < lp.size(0); ++r) {
      const auto& g = (*gens)[first + static_cast<std::size_t>(r)];
      for (std::size_t t = 0; t < g.tokens.size(); ++t)
        worst = std::max(worst, std::abs(lp[r][static_cast<std::int64_t>(t)].item<double>() - g.logprobs[t]));
    }
    b.logprobs.sum().backward();
  });
  REQUIRE(s.ok());
  MESSAGE("CUDA: max |score - generation log-prob| = " << worst);
  CHECK(worst < 1e-4);

  CausalLM bf = load_on("qwen2", at::kBFloat16);
  const at::Tensor ids = fixture_tensor("qwen2_logits.safetensors", "input_ids").cuda();
  at::NoGradGuard no_grad;
  const double mean_diff = (bf->forward(ids).to(at::kFloat) - model->forward(ids)).abs().mean().item<double>();
  MESSAGE("CUDA bf16 vs fp32: mean |logits diff| = " << mean_diff);
  CHECK(mean_diff < 0.1);
  sampling_options ob = o;
  auto bg = generate(*bf, prompts, ob);
  REQUIRE(bg.ok());
  for (const auto& g : *bg) CHECK(g.tokens.size() == 24u);
}

TEST_CASE("model on CUDA: stop tokens checked every 8 steps (the GPU default) change no sample") {
  require_gpu();
  CausalLM model = load_on("qwen2", at::kFloat);
  const std::vector<std::vector<std::int64_t>> prompts{{5, 17, 300, 42}, {1}, {100, 200, 300, 7}};
  sampling_options o;
  o.n = 4;
  o.temperature = 0.7;
  o.max_new_tokens = 40;
  o.seed = 11;
  o.stop_tokens = {3, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25};
  o.check_stops_every = 1;
  auto every = generate(*model, prompts, o);
  o.check_stops_every = 0;  // the default: every 8 steps on a GPU
  auto batched = generate(*model, prompts, o);
  REQUIRE(every.ok());
  REQUIRE(batched.ok());
  int stopped = 0;
  for (std::size_t i = 0; i < every->size(); ++i) {
    CHECK((*batched)[i].tokens == (*every)[i].tokens);
    CHECK((*batched)[i].stopped == (*every)[i].stopped);
    stopped += (*every)[i].stopped;
  }
  CHECK(stopped > 0);
}

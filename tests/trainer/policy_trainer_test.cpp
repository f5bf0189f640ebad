// policy_trainer on the fixture tiny Qwen2 (tests/model/fixtures/qwen2, 2 layers, hidden 64, vocab
// 512) on CPU: checkpoint -> resume is bit-identical to an uninterrupted run, and a synthetic
// reward (the fraction of a target token in sampled completions) rises.
#include <ATen/ATen.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <unistd.h>

#include "../model/test_files.hpp"
#include "model/generate.hpp"
#include "model/weights.hpp"
#include "trainer/checkpoint.hpp"
#include "trainer/policy_trainer.hpp"
#include "tests/doctest_torch.hpp"  // last: after every header that may include LibTorch

using namespace kforge;
using namespace kforge::trainer;

namespace {

const std::string qwen2_dir = std::string(KFORGE_MODEL_FIXTURES) + "/qwen2";

using model::testing::scratch_dir;

model::CausalLM load_policy() {
  auto m = model::load_causal_lm(qwen2_dir);
  REQUIRE_MESSAGE(m.ok(), (m.ok() ? "" : m.message()));
  for (auto& p : (*m)->parameters()) p.set_requires_grad(true);
  return std::move(*m);
}

/// `g` completions of `max_new` tokens per prompt sampled from the trainer's policy, rewarded with
/// the fraction of `target` tokens (target < 0: of even tokens, a reward almost every group varies
/// in), tagged with the current version, as the sampler would send them.
train_batch sample_batch(policy_trainer& t, const std::vector<std::vector<std::int64_t>>& prompts,
                         std::int64_t g, std::int64_t max_new, std::uint64_t seed,
                         std::int64_t target) {
  model::sampling_options so;
  so.n = g;
  so.max_new_tokens = max_new;
  so.seed = seed;
  auto gens = model::generate(*t.policy(), prompts, so);
  REQUIRE_MESSAGE(gens.ok(), (gens.ok() ? "" : gens.message()));
  train_batch b;
  b.step = static_cast<std::uint64_t>(t.steps());
  b.groups.resize(prompts.size());
  for (auto& gen : *gens) {
    train_sample s;
    s.prompt_tokens = prompts[gen.prompt];
    s.completion_tokens = gen.tokens;
    s.logprobs = gen.logprobs;
    const auto hits = target >= 0 ? std::count(gen.tokens.begin(), gen.tokens.end(), target)
                                  : std::count_if(gen.tokens.begin(), gen.tokens.end(),
                                                  [](std::int64_t x) { return x % 2 == 0; });
    s.reward = static_cast<double>(hits) / static_cast<double>(gen.tokens.size());
    s.policy_version = t.policy_version();
    b.groups[gen.prompt].samples.push_back(std::move(s));
  }
  return b;
}

double mean_reward(const train_batch& b) {
  double sum = 0;
  int n = 0;
  for (const auto& g : b.groups)
    for (const auto& s : g.samples) sum += s.reward, ++n;
  return sum / n;
}

const std::vector<std::vector<std::int64_t>> prompts{{1, 17, 42}, {1, 99}, {1, 250, 7, 3}, {1, 5}};

policy_trainer_options resume_options() {
  policy_trainer_options o;
  o.step.lr = 1e-2;
  o.step.micro_batch_size = 5;  // 16 samples: micro-batches of 5, 5, 5, 1
  o.kl.initial_coef = 0.01;
  o.kl.target_low = 0;
  o.kl.target_high = 1e-12;  // every step's KL is above the band: the coefficient moves each step
  o.seed = 11;
  o.source_dir = qwen2_dir;
  return o;
}

/// `n` steps, each on a batch sampled with a seed drawn from LibTorch's default generator, so
/// that a resume which did not restore the generator would train on other data.
void train(policy_trainer& t, int n) {
  for (int i = 0; i < n; ++i) {
    const auto seed = static_cast<std::uint64_t>(at::randint(1 << 30, {1}, at::kLong).item<std::int64_t>());
    auto st = t.step(sample_batch(t, prompts, 4, 5, seed, -1));
    REQUIRE_MESSAGE(st.ok(), (st.ok() ? "" : st.message()));
    REQUIRE(st->grpo.stepped);
  }
}

bool same_weights(const model::CausalLM& a, const model::CausalLM& b) {
  const auto pa = a->named_parameters(), pb = b->named_parameters();
  bool same = pa.size() == pb.size();
  for (const auto& item : pa) same = same && at::equal(item.value(), pb[item.key()]);
  return same;
}

}  // namespace

TEST_CASE("policy trainer: checkpoint -> resume gives bit-identical weights to an uninterrupted run") {
  scratch_dir dir;
  const int n = 4;

  at::manual_seed(3);
  policy_trainer whole(load_policy(), resume_options());
  train(whole, n);

  at::manual_seed(3);
  {
    policy_trainer first(load_policy(), resume_options());
    train(first, n / 2);
    REQUIRE(first.save_checkpoint(dir.path("ckpt")).ok());
    REQUIRE(first.save_checkpoint(dir.path("ckpt2")).ok());
    train(first, 1);
    REQUIRE(first.save_checkpoint(dir.path("ckpt2")).ok());  // replaces the one there
  }
  CHECK(std::filesystem::exists(dir.path("ckpt/config.json")));  // loadable as a model too
  CHECK(model::load_causal_lm(dir.path("ckpt")).ok());
  CHECK_FALSE(std::filesystem::exists(dir.path("ckpt.tmp")));
  CHECK_FALSE(std::filesystem::exists(dir.path("ckpt2.old")));
  auto replaced = read_trainer_state(dir.path("ckpt2"));
  REQUIRE(replaced.ok());
  CHECK(replaced->step == n / 2 + 1);

  at::manual_seed(12345);  // whatever the process did in between
  policy_trainer resumed(load_policy(), resume_options());
  const auto ok = resumed.load_checkpoint(dir.path("ckpt"));
  REQUIRE_MESSAGE(ok.ok(), (ok.ok() ? "" : ok.message()));
  CHECK(resumed.steps() == n / 2);
  train(resumed, n - n / 2);

  CHECK(resumed.steps() == whole.steps());
  CHECK(resumed.policy_version() == whole.policy_version());
  CHECK(resumed.stepper().steps() == whole.stepper().steps());
  CHECK(resumed.kl().coef() == whole.kl().coef());
  CHECK(resumed.kl().to_json() == whole.kl().to_json());
  CHECK(whole.kl().coef() > resume_options().kl.initial_coef);  // the controller did move
  CHECK(same_weights(resumed.policy(), whole.policy()));
  CHECK_FALSE(same_weights(whole.policy(), whole.reference()));  // training did change them
  CHECK(same_weights(resumed.reference(), whole.reference()));

  // Controls, so the comparison above can fail: one random number drawn after the load (the
  // generator not restored) and no optimiser state (moments restarted) each change the result.
  policy_trainer shifted(load_policy(), resume_options());
  REQUIRE(shifted.load_checkpoint(dir.path("ckpt")).ok());
  (void)at::rand({1});
  train(shifted, n - n / 2);
  CHECK_FALSE(same_weights(shifted.policy(), whole.policy()));

  {
    policy_trainer fresh(load_policy(), resume_options());
    REQUIRE(fresh.save_checkpoint(dir.path("fresh")).ok());
  }
  std::filesystem::copy(dir.path("ckpt"), dir.path("no_moments"));
  std::filesystem::copy_file(dir.path("fresh/optimizer.pt"), dir.path("no_moments/optimizer.pt"),
                             std::filesystem::copy_options::overwrite_existing);
  policy_trainer no_moments(load_policy(), resume_options());
  REQUIRE(no_moments.load_checkpoint(dir.path("no_moments")).ok());
  CHECK(no_moments.stepper().steps() == 0);
  train(no_moments, n - n / 2);
  CHECK_FALSE(same_weights(no_moments.policy(), whole.policy()));
}

TEST_CASE("policy trainer: a synthetic reward (fraction of a target token) rises") {
  at::manual_seed(0);
  policy_trainer_options o;
  o.step.lr = 2e-3;
  o.step.micro_batch_size = 16;
  // A random tiny model's KL to its start is orders of magnitude above an LLM's: a wide band keeps
  // a small KL term without the controller holding the policy at the reference.
  o.kl.initial_coef = 0.01;
  o.kl.target_high = 2.0;
  policy_trainer t(load_policy(), o);
  std::vector<std::string> log;
  t.set_log_sink([&log](const policy_step_stats& s) { log.push_back(format_step_log(s)); });

  // The target: a token the untrained model samples now and then (about 2-8 % of tokens), so that
  // most groups see different rewards from the first step on.
  const std::int64_t g = 8, max_new = 6;
  std::int64_t target = -1;
  {
    auto probe = sample_batch(t, prompts, g, max_new, 999, 0);
    std::map<std::int64_t, int> freq;
    int total = 0;
    for (const auto& grp : probe.groups)
      for (const auto& s : grp.samples)
        for (auto tok : s.completion_tokens) ++freq[tok], ++total;
    int best = 0;
    for (const auto& [tok, f] : freq)
      if (f > best && f <= total / 12) best = f, target = tok;
    MESSAGE("target token " << target << ": " << best << " of " << total << " sampled tokens");
  }
  REQUIRE(target >= 0);

  const int steps = 30;
  double first = 0, last = 0;
  for (int step = 0; step < steps; ++step) {
    const auto batch = sample_batch(t, prompts, g, max_new, 1000 + static_cast<std::uint64_t>(step), target);
    const double r = mean_reward(batch);
    if (step < 5) first += r / 5;
    if (step >= steps - 5) last += r / 5;
    auto st = t.step(batch);
    REQUIRE(st.ok());
    REQUIRE(std::isfinite(st->grpo.loss.loss));
  }
  MESSAGE("mean reward: first 5 steps " << first << ", last 5 steps " << last << "; last log line: "
                                        << log.back());
  CHECK(first < 0.15);
  CHECK(last > first + 0.3);
  REQUIRE(log.size() == static_cast<std::size_t>(steps));
  CHECK(log.back().find("kl_coef=") != std::string::npos);
  CHECK(log.back().find("kl_window=") != std::string::npos);
  CHECK(t.kl().steps() > 0);
}

TEST_CASE("policy trainer: excluded samples are dropped, bad samples are errors that change nothing") {
  at::manual_seed(1);
  policy_trainer t(load_policy(), resume_options());
  auto batch = sample_batch(t, prompts, 4, 3, 5, -1);
  batch.groups[0].samples[1].excluded = "infra_error: GPU lost";
  for (auto& s : batch.groups[0].samples) s.reward = static_cast<double>(&s - &batch.groups[0].samples[0]);
  const auto st = t.step(batch);
  REQUIRE(st.ok());
  CHECK(st->excluded_samples == 1);
  CHECK(st->grpo.stepped);
  CHECK(st->policy_version == 1);

  const auto before = t.policy()->output_weight().clone();
  auto bad = batch;
  bad.groups[1].samples[0].completion_tokens[0] = 512;  // vocab 512
  auto e = t.step(bad);
  REQUIRE_FALSE(e.ok());
  CHECK(e.message().find("outside the vocabulary") != std::string::npos);
  bad = batch;
  bad.groups[1].samples[0].logprobs.pop_back();
  CHECK_FALSE(t.step(bad).ok());
  CHECK(at::equal(before, t.policy()->output_weight()));
  CHECK(t.steps() == 1);

  scratch_dir dir;
  REQUIRE(t.save_checkpoint(dir.path("c")).ok());
  policy_trainer other_seed(load_policy(), [] {
    auto o = resume_options();
    o.seed = 12;
    return o;
  }());
  CHECK_FALSE(other_seed.load_checkpoint(dir.path("c")).ok());  // another run's checkpoint
  CHECK_FALSE(t.load_checkpoint(dir.path("missing")).ok());

  auto state = read_trainer_state(dir.path("c"));
  REQUIRE(state.ok());
  CHECK(state->step == 1);
  CHECK(state->policy_version == 1);
  CHECK(!state->cpu_rng.empty());
  const auto again = parse_trainer_state(to_json(*state), "x");
  REQUIRE(again.ok());
  CHECK(again->cpu_rng == state->cpu_rng);
  CHECK(again->kl_controller == state->kl_controller);
  CHECK_FALSE(parse_trainer_state("{\"version\": 1}", "x").ok());
}

// GRPO math against hand-computed values, and a tiny policy trained end to end on CPU.
// The only test TU that includes torch (each costs ~20 s of CI build).
// Two nn modules, not <torch/torch.h>: about half the compile time.
#include <torch/types.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>
#include <torch/utils.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "trainer/collective.hpp"
#include "trainer/grpo.hpp"
#include "trainer/grpo_step.hpp"
#include "trainer/kl_controller.hpp"
#include "tests/doctest_torch.hpp"  // last: after every header that may include LibTorch

using namespace kforge::trainer;
using doctest::Approx;

namespace {

torch::Tensor row(std::initializer_list<double> v) {
  return torch::tensor(std::vector<double>(v), torch::kFloat);
}
torch::Tensor mat(std::vector<std::vector<double>> rows) {
  std::vector<torch::Tensor> r;
  for (auto& x : rows) r.push_back(torch::tensor(x, torch::kFloat));
  return torch::stack(r);
}
double val(const torch::Tensor& t, int64_t i, int64_t j) { return t[i][j].item<double>(); }

}  // namespace

TEST_CASE("advantages: group-normalised, equal groups flagged and skipped") {
  // g0 {1,0,0,1}: mean .5, unbiased std sqrt(1/3) -> +-0.5 * sqrt(3) = +-0.8660254
  // g1 {.3,.3,.3}: all equal; g2 {2}: single sample; g3 {0,1,2}: mean 1, unbiased std 1 -> -1, 0, 1
  const std::vector<double> r{1, 0, 0, 1, .3, .3, .3, 2, 0, 1, 2};
  const std::vector<int64_t> g{4, 3, 1, 3};
  grpo_options o;
  auto a = compute_advantages(r, g, o);
  const double k = 0.5 / (std::sqrt(1.0 / 3.0) + 1e-6);
  CHECK(a.advantages[0] == Approx(k));
  CHECK(a.advantages[1] == Approx(-k));
  CHECK(a.advantages[3] == Approx(k));
  for (int i = 4; i < 8; ++i) CHECK(a.advantages[static_cast<size_t>(i)] == 0.0);
  CHECK(a.advantages[8] == Approx(-1.0 / (1 + 1e-6)));
  CHECK(a.advantages[9] == 0.0);
  CHECK(a.advantages[10] == Approx(1.0 / (1 + 1e-6)));
  CHECK(a.groups == 4);
  CHECK(a.equal_groups == 2);
  CHECK(a.skipped_groups == 2);
  CHECK(a.kept_samples == 7);
  const std::vector<bool> keep{true, true, true, true, false, false, false, false, true, true, true};
  CHECK(a.keep == keep);
  CHECK(a.adv_mean == Approx(0.0));
  CHECK(a.adv_min == Approx(-1.0 / (1 + 1e-6)));
  CHECK(a.adv_max == Approx(1.0));
  CHECK(a.reward_mean == Approx(7.9 / 11));

  o.unbiased_std = false;  // g0 std 0.5 -> +-1; g3 std sqrt(2/3)
  a = compute_advantages(r, g, o);
  CHECK(a.advantages[0] == Approx(0.5 / (0.5 + 1e-6)));
  CHECK(a.advantages[10] == Approx(1.0 / (std::sqrt(2.0 / 3.0) + 1e-6)));
  o.scale_by_std = false;  // only the mean removed
  a = compute_advantages(r, g, o);
  CHECK(a.advantages[0] == Approx(0.5));
  CHECK(a.advantages[10] == Approx(1.0));
  o.skip_equal_groups = false;  // still counted, but kept (advantage 0)
  a = compute_advantages(r, g, o);
  CHECK(a.equal_groups == 2);
  CHECK(a.skipped_groups == 0);
  CHECK(a.kept_samples == 11);

  CHECK_THROWS_AS(compute_advantages(r, {4, 3}, o), std::invalid_argument);
  CHECK_THROWS_AS(compute_advantages({1.0}, {0, 1}, o), std::invalid_argument);
}

TEST_CASE("advantages against the group's draws: the buffer's dropped repeats still set the mean") {
  // g0 kept {0, 0} of draws {1, 1, 1, 0, 0} (the correct kernel's repeats were dropped): against
  // the kept ones alone it is all-equal; against the draws, mean .6, unbiased std sqrt(.3).
  // g1 has no draws (an old batch): its own rewards {0, 1}, mean .5, std sqrt(.5).
  // g2 kept {1, 1} of draws {1, 1, 1}: all-equal either way.
  const std::vector<double> r{0, 0, 0, 1, 1, 1};
  const std::vector<int64_t> g{2, 2, 2};
  grpo_options o;
  const auto own = compute_advantages(r, g, o);
  CHECK(own.equal_groups == 2);
  CHECK(own.draw_signal_groups == 0);
  CHECK(own.advantages[0] == 0.0);

  const auto a = compute_advantages(r, g, o, {{1, 1, 1, 0, 0}, {}, {1, 1, 1}});
  const double k0 = -0.6 / (std::sqrt(0.3) + 1e-6), k1 = 0.5 / (std::sqrt(0.5) + 1e-6);
  CHECK(a.advantages[0] == Approx(k0));
  CHECK(a.advantages[1] == Approx(k0));
  CHECK(a.advantages[2] == Approx(-k1));
  CHECK(a.advantages[3] == Approx(k1));
  CHECK(a.advantages[4] == 0.0);
  CHECK(a.equal_groups == 1);
  CHECK(a.draw_signal_groups == 1);  // g0 only: g1 has its own signal, g2 none
  CHECK(a.kept_samples == 4);
  CHECK(a.reward_mean == Approx(0.5));  // over the samples trained on, as before

  // One kept sample has a signal against several draws; one draw is no group to compare with.
  const auto one = compute_advantages({0.0}, {1}, o, {{0.0, 1.0}});
  CHECK(one.advantages[0] == Approx(-0.5 / (std::sqrt(0.5) + 1e-6)));
  CHECK(one.draw_signal_groups == 1);
  CHECK(compute_advantages({1.0}, {1}, o, {{1.0}}).equal_groups == 1);
  CHECK_THROWS_AS(compute_advantages(r, g, o, {{1.0}}), std::invalid_argument);
}

TEST_CASE("k3 estimator: exp(d) - d - 1 with d = ref - logp, and its gradient 1 - exp(d)") {
  auto logp = row({-1.0, -2.0, -0.5}).requires_grad_(true);
  const auto ref = logp.detach() + row({std::log(2.0), -std::log(2.0), 0.0});
  const auto k = k3_kl(logp, ref);
  CHECK(k[0].item<double>() == Approx(2 - std::log(2.0) - 1));    // 0.3068528
  CHECK(k[1].item<double>() == Approx(0.5 + std::log(2.0) - 1));  // 0.1931472
  CHECK(k[2].item<double>() == Approx(0.0));
  k.sum().backward();
  CHECK(logp.grad()[0].item<double>() == Approx(1 - 2.0));
  CHECK(logp.grad()[1].item<double>() == Approx(1 - 0.5));
  CHECK(logp.grad()[2].item<double>() == Approx(0.0));
}

TEST_CASE("grpo loss: clipped ratio, token mean, hand-computed value, stats and gradient") {
  // Row 0, A = +1: ratios 1.5 (clipped high to 1.28), 0.5; third token is padding (NaN there).
  // Row 1, A = -2: ratios 0.5 (clipped low to 0.8), 1.1, 1.0.
  // surrogate = 1.28 + 0.5 - 1.6 - 2.2 - 2.0 = -4.02; loss = 4.02 / 5 tokens = 0.804.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const auto old = mat({{-1, -1, -1}, {-2, -2, -2}});
  const auto lr = mat({{std::log(1.5), std::log(0.5), 0}, {std::log(0.5), std::log(1.1), 0}});
  auto logp = (old + lr).clone();
  logp[0][2] = nan;
  logp.requires_grad_(true);
  grpo_loss_inputs in;
  in.logp = logp;
  in.old_logp = old;
  in.mask = mat({{1, 1, 0}, {1, 1, 1}});
  in.advantages = row({1.0, -2.0});
  grpo_options o;  // eps_low 0.2, eps_high 0.28
  auto res = grpo_loss(in, o, 0.1);
  CHECK(res.loss.item<double>() == Approx(0.804));
  CHECK(res.stats.policy_loss == Approx(0.804));
  CHECK(res.stats.kl_loss == 0.0);
  CHECK(res.stats.tokens == 5);
  CHECK(res.stats.mean_ratio == Approx((1.5 + 0.5 + 0.5 + 1.1 + 1.0) / 5));
  CHECK(res.stats.clip_high_fraction == Approx(0.2));
  CHECK(res.stats.clip_low_fraction == Approx(0.2));
  CHECK(res.stats.clip_fraction == Approx(0.4));
  CHECK(res.stats.mean_is_weight == Approx(1.0));

  // d loss / d logp = -A * ratio / N where unclipped, 0 where clipped or padded.
  res.loss.backward();
  const auto g = logp.grad();
  CHECK_FALSE(torch::isnan(g).any().item<bool>());
  CHECK(val(g, 0, 0) == 0.0);
  CHECK(val(g, 0, 1) == Approx(-0.5 / 5));
  CHECK(val(g, 0, 2) == 0.0);
  CHECK(val(g, 1, 0) == 0.0);
  CHECK(val(g, 1, 1) == Approx(2 * 1.1 / 5));
  CHECK(val(g, 1, 2) == Approx(2 * 1.0 / 5));

  // A batch-wide normaliser (micro-batching) divides by it instead of this input's 5 tokens.
  auto res10 = grpo_loss(in, o, 0.1, 10);
  CHECK(res10.loss.item<double>() == Approx(0.402));
  CHECK(res10.stats.mean_ratio == Approx(res.stats.mean_ratio));  // stats stay per-token means
}

TEST_CASE("grpo loss: without old log-probs the ratio is 1 and the gradient is -A/N") {
  auto logp = mat({{-1.0, -3.0}}).requires_grad_(true);
  grpo_loss_inputs in;
  in.logp = logp;
  in.mask = mat({{1, 1}});
  in.advantages = row({0.5});
  auto res = grpo_loss(in, grpo_options{}, 0.0);
  CHECK(res.loss.item<double>() == Approx(-0.5));
  CHECK(res.stats.mean_ratio == 1.0);
  CHECK(res.stats.clip_fraction == 0.0);
  res.loss.backward();
  CHECK(val(logp.grad(), 0, 0) == Approx(-0.25));
  CHECK(val(logp.grad(), 0, 1) == Approx(-0.25));
}

TEST_CASE("grpo loss: KL term and off-policy importance weights") {
  // One row, A = 1, on the proximal policy (ratio 1). Behaviour log-probs give weights
  // exp(old - behaviour) = 1.5, 3 -> truncated to is_cap 2, 0.5. KL d = ref - logp = ln 2, -ln 2, 0.
  auto logp = mat({{-1.0, -1.0, -1.0}}).requires_grad_(true);
  grpo_loss_inputs in;
  in.logp = logp;
  in.mask = mat({{1, 1, 1}});
  in.advantages = row({1.0});
  in.behaviour_logp = mat({{-1 - std::log(1.5), -1 - std::log(3.0), -1 - std::log(0.5)}});
  in.ref_logp = mat({{-1 + std::log(2.0), -1 - std::log(2.0), -1.0}});
  const double beta = 0.1;
  auto res = grpo_loss(in, grpo_options{}, beta);
  const double k0 = 2 - std::log(2.0) - 1, k1 = 0.5 + std::log(2.0) - 1;
  const double policy = -(1.5 + 2.0 + 0.5) / 3;
  const double kl = beta * (k0 + k1) / 3;
  CHECK(res.stats.policy_loss == Approx(policy));
  CHECK(res.stats.kl_loss == Approx(kl));
  CHECK(res.loss.item<double>() == Approx(policy + kl));
  CHECK(res.stats.mean_kl == Approx((k0 + k1) / 3));
  CHECK(res.stats.mean_is_weight == Approx(4.0 / 3));
  CHECK(res.stats.is_truncated_fraction == Approx(1.0 / 3));
  // d/dlogp = (-w * A * ratio + beta * (1 - exp(d))) / N; the weights carry no gradient.
  res.loss.backward();
  CHECK(val(logp.grad(), 0, 0) == Approx((-1.5 + beta * (1 - 2.0)) / 3));
  CHECK(val(logp.grad(), 0, 1) == Approx((-2.0 + beta * (1 - 0.5)) / 3));
  CHECK(val(logp.grad(), 0, 2) == Approx(-0.5 / 3));
}

TEST_CASE("grpo loss: shape mismatches are reported by name") {
  grpo_loss_inputs in;
  in.logp = torch::zeros({2, 3});
  in.mask = torch::ones({2, 3});
  in.advantages = torch::zeros({3});
  CHECK_THROWS_WITH_AS(grpo_loss(in, grpo_options{}, 0), doctest::Contains("advantages"),
                       std::invalid_argument);
  in.advantages = torch::zeros({2});
  in.ref_logp = torch::zeros({2, 2});
  CHECK_THROWS_WITH_AS(grpo_loss(in, grpo_options{}, 0), doctest::Contains("ref_logp"),
                       std::invalid_argument);
}

// ---------------------------------------------------------------------------------------------
// A "bigram" language model over 8 tokens: logits of the next token from the current one.

namespace {

constexpr int64_t vocab = 8;
constexpr int64_t target_token = 5;

struct BigramImpl : torch::nn::Module {
  BigramImpl()
      : emb(register_module("emb", torch::nn::Embedding(vocab, 16))),
        out(register_module("out", torch::nn::Linear(16, vocab))) {}
  torch::Tensor forward(const torch::Tensor& tokens) { return out(emb(tokens)); }  // [B, L, V]
  torch::nn::Embedding emb;
  torch::nn::Linear out;
};
TORCH_MODULE(Bigram);

logprob_fn logprobs_of(Bigram& m) {
  return [&m](const std::vector<const grpo_sample*>& s) {
    const auto packed = pack_sequences(s);
    return gather_completion_logp(m->forward(packed.tokens), packed);
  };
}

/// G completions of `len` tokens for each prompt, sampled from `m`, rewarded with the fraction of
/// target tokens; behaviour log-probs recorded as a sampler would.
std::vector<grpo_group> sample_batch(Bigram& m, const std::vector<int64_t>& prompts, int64_t g,
                                     int64_t len, uint64_t version) {
  torch::NoGradGuard no_grad;
  std::vector<grpo_group> batch;
  for (auto p : prompts) {
    grpo_group group;
    auto cur = torch::full({g}, p, torch::kLong);
    std::vector<torch::Tensor> toks, lps;
    for (int64_t t = 0; t < len; ++t) {
      const auto logp = torch::log_softmax(m->forward(cur), -1);  // [G, V]
      cur = torch::multinomial(logp.exp(), 1).squeeze(1);
      toks.push_back(cur);
      lps.push_back(logp.gather(1, cur.unsqueeze(1)).squeeze(1));
    }
    const auto tok = torch::stack(toks, 1), lp = torch::stack(lps, 1);
    for (int64_t i = 0; i < g; ++i) {
      grpo_sample s;
      s.prompt = {p};
      int64_t hits = 0;
      for (int64_t t = 0; t < len; ++t) {
        s.completion.push_back(tok[i][t].item<int64_t>());
        s.behaviour_logp.push_back(lp[i][t].item<float>());
        hits += s.completion.back() == target_token;
      }
      s.reward = static_cast<double>(hits) / static_cast<double>(len);
      s.policy_version = version;
      group.samples.push_back(std::move(s));
    }
    batch.push_back(std::move(group));
  }
  return batch;
}

double mean_reward(const std::vector<grpo_group>& b) {
  double sum = 0;
  int n = 0;
  for (const auto& g : b)
    for (const auto& s : g.samples) sum += s.reward, ++n;
  return sum / n;
}

void copy_weights(Bigram& from, Bigram& to) {
  torch::NoGradGuard no_grad;
  auto src = from->parameters(), dst = to->parameters();
  for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
}

}  // namespace

TEST_CASE("pack_sequences + gather_completion_logp pick the completion tokens' log-probs") {
  grpo_sample a, b;
  a.prompt = {1, 2};
  a.completion = {3};
  b.prompt = {4};
  b.completion = {5, 6, 7};
  const auto p = pack_sequences({&a, &b}, 0);
  CHECK(p.tokens.sizes() == torch::IntArrayRef({2, 4}));
  CHECK(p.max_completion == 3);
  // Logits that make log_softmax easy to read: row-wise one-hot-ish values.
  auto logits = torch::randn({2, 4, vocab});
  const auto ls = torch::log_softmax(logits, -1);
  const auto lp = gather_completion_logp(logits, p);
  CHECK(lp.sizes() == torch::IntArrayRef({2, 3}));
  CHECK(val(lp, 0, 0) == Approx(ls[0][1][3].item<double>()));  // token 3 predicted at position 1
  CHECK(val(lp, 1, 0) == Approx(ls[1][0][5].item<double>()));
  CHECK(val(lp, 1, 1) == Approx(ls[1][1][6].item<double>()));
  CHECK(val(lp, 1, 2) == Approx(ls[1][2][7].item<double>()));
}

TEST_CASE("grpo step: micro-batching does not change the update") {
  torch::manual_seed(1);
  Bigram a, b;
  copy_weights(a, b);
  const auto batch = sample_batch(a, {0, 1, 2}, 4, 5, 0);
  grpo_step_options o;
  o.lr = 1e-2;
  o.max_grad_norm = 0;  // compare raw gradients' updates
  o.micro_batch_size = 12;
  grpo_stepper whole(a->parameters(), o);
  o.micro_batch_size = 1;
  grpo_stepper pieces(b->parameters(), o);
  const auto sa = whole.step(batch, logprobs_of(a), {}, 0.0, 0);
  const auto sb = pieces.step(batch, logprobs_of(b), {}, 0.0, 0);
  REQUIRE(sa.stepped);
  REQUIRE(sb.stepped);
  CHECK(sa.micro_batches == 1);
  CHECK(sb.micro_batches == sb.samples);
  CHECK(sa.loss.loss == Approx(sb.loss.loss));
  CHECK(sa.grad_norm == Approx(sb.grad_norm));
  auto pa = a->parameters(), pb = b->parameters();
  for (size_t i = 0; i < pa.size(); ++i) CHECK(torch::allclose(pa[i], pb[i], 1e-5, 1e-6));
}

TEST_CASE("grpo step: the gradient norm is reported and clipped to max_grad_norm") {
  torch::manual_seed(4);
  Bigram m;
  auto batch = sample_batch(m, {0, 1}, 4, 4, 0);
  for (auto& g : batch)
    for (size_t i = 0; i < g.samples.size(); ++i) g.samples[i].reward = static_cast<double>(i);
  grpo_step_options o;
  o.max_grad_norm = 1e-4;
  grpo_stepper s(m->parameters(), o);
  const auto st = s.step(batch, logprobs_of(m), {}, 0.0, 0);
  REQUIRE(st.stepped);
  CHECK(st.grad_norm > 1e-4);
  CHECK(st.grad_clipped);
  o.max_grad_norm = 1e6;
  grpo_stepper loose(m->parameters(), o);
  CHECK_FALSE(loose.step(batch, logprobs_of(m), {}, 0.0, 0).grad_clipped);
}

TEST_CASE("grpo step: stale samples are importance-weighted, current ones are not") {
  torch::manual_seed(2);
  Bigram m, old;
  copy_weights(m, old);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : old->parameters()) p.add_(torch::randn_like(p) * 0.3);
  }
  auto stale = sample_batch(old, {0, 3}, 4, 4, 6);
  for (auto& g : stale)  // rewards with signal in every group, whatever was sampled
    for (size_t i = 0; i < g.samples.size(); ++i) g.samples[i].reward = static_cast<double>(i);
  grpo_step_options o;
  o.lr = 1e-3;
  grpo_stepper s(m->parameters(), o);
  auto st = s.step(stale, logprobs_of(m), {}, 0.0, 7);  // trainer at version 7: one behind
  REQUIRE(st.samples == 8);
  CHECK(st.stale_samples == 8);
  CHECK(st.loss.mean_is_weight != Approx(1.0));
  st = s.step(stale, logprobs_of(m), {}, 0.0, 6);  // same version: on-policy
  REQUIRE(st.samples == 8);
  CHECK(st.stale_samples == 0);
  CHECK(st.loss.mean_is_weight == Approx(1.0));
  o.correct_off_policy = false;
  grpo_stepper off(m->parameters(), o);
  st = off.step(stale, logprobs_of(m), {}, 0.0, 7);
  CHECK(st.stale_samples == 0);
}

TEST_CASE("grpo step: all-equal groups are skipped, and a batch of only those does not step") {
  torch::manual_seed(3);
  Bigram m;
  auto batch = sample_batch(m, {0, 1}, 4, 3, 0);
  for (auto& g : batch)
    for (auto& s : g.samples) s.reward = 0.5;
  grpo_stepper s(m->parameters(), grpo_step_options{});
  const auto before = m->parameters()[0].clone();
  const auto st = s.step(batch, logprobs_of(m), {}, 0.0, 0);
  CHECK_FALSE(st.stepped);
  CHECK(st.advantages.skipped_groups == 2);
  CHECK(st.samples == 0);
  CHECK(s.steps() == 0);
  CHECK(torch::equal(before, m->parameters()[0]));
}

TEST_CASE("grpo step: a tiny policy learns to emit the rewarded token") {
  torch::manual_seed(0);
  Bigram policy, reference;
  copy_weights(policy, reference);
  for (auto& p : reference->parameters()) p.requires_grad_(false);

  grpo_step_options o;
  o.lr = 3e-2;
  o.micro_batch_size = 8;
  grpo_stepper stepper(policy->parameters(), o);
  // A toy's KL is orders of magnitude above an LLM's: the default band [1e-3, 5e-3] would (rightly)
  // drive the coefficient to its bound and hold the policy at the reference. A wide band keeps a
  // small KL term in the loss without fighting the reward.
  kl_controller_options ko;
  ko.initial_coef = 0.01;
  ko.target_high = 2.0;
  kl_controller kl(ko);
  const std::vector<int64_t> prompts{0, 1, 2, 3};

  double first = 0, last = 0, max_kl = 0;
  const int steps = 40;
  for (int step = 0; step < steps; ++step) {
    const auto batch = sample_batch(policy, prompts, 8, 8, static_cast<uint64_t>(step));
    const double r = mean_reward(batch);
    if (step < 5) first += r / 5;
    if (step >= steps - 5) last += r / 5;
    const auto st = stepper.step(batch, logprobs_of(policy), logprobs_of(reference), kl.coef(),
                                 static_cast<uint64_t>(step));
    REQUIRE(std::isfinite(st.loss.loss));
    if (st.stepped) kl.update(st.loss.mean_kl);
    max_kl = std::max(max_kl, st.loss.mean_kl);
  }
  MESSAGE("mean reward: first 5 steps " << first << ", last 5 steps " << last << ", max KL "
                                        << max_kl << ", AdamW steps " << stepper.steps());
  CHECK(first < 0.3);         // about 1/8 at random initialisation
  CHECK(last > first + 0.4);  // clearly learned (0.21 -> 0.99 with this seed)
  CHECK(max_kl > 0.1);        // moved away from the reference, and the KL saw it
  // Once every completion earns the same reward, groups carry no signal and steps are skipped.
  CHECK(stepper.steps() > steps / 2);
  CHECK(stepper.steps() <= steps);
}

TEST_CASE("grpo step: a rank whose share fails fails the step on every rank, and none is left waiting") {
  torch::manual_seed(5);
  Bigram a, b;
  copy_weights(a, b);
  auto batch = sample_batch(a, {0, 1, 2}, 4, 5, 0);
  for (auto& g : batch)  // signal in every group
    for (size_t i = 0; i < g.samples.size(); ++i) g.samples[i].reward = static_cast<double>(i);
  grpo_step_options o;
  o.micro_batch_size = 2;
  auto group = make_thread_group(2);
  std::vector<std::string> errors(2);
  std::vector<Bigram> models{a, b};
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      grpo_stepper s(models[static_cast<size_t>(r)]->parameters(), o);
      logprob_fn fn = logprobs_of(models[static_cast<size_t>(r)]);
      if (r == 1) fn = [](const std::vector<const grpo_sample*>&) -> torch::Tensor {
          throw std::runtime_error("out of memory (simulated)");
        };
      try {
        s.step(batch, fn, {}, 0.0, 0, group[static_cast<size_t>(r)].get());
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();  // a hang here is the bug this guards against
  CHECK(errors[0].find("1 rank(s) failed their share of the batch") != std::string::npos);
  CHECK(errors[1].find("out of memory (simulated)") != std::string::npos);
  auto pa = a->parameters();
  Bigram fresh;
  copy_weights(b, fresh);
  for (size_t i = 0; i < pa.size(); ++i) CHECK(torch::equal(pa[i], fresh->parameters()[i]));  // nothing stepped
}

TEST_CASE("grpo step: an episode's observation tokens and its prompt get no gradient") {
  // The log-probs come straight from a leaf tensor of logits, the only "parameter": AdamW's first
  // step moves exactly the entries with a non-zero gradient (no weight decay), so what moved says
  // which positions the loss reads. Prompt {1, 2}: completion token t is predicted at position
  // 1 + t. Completion {3, 4, 5, 6}, where 4 and 5 are an observation between two turns (mask 0).
  auto logits = torch::randn({2, 6, vocab}, torch::kDouble).requires_grad_(true);
  const auto before = logits.detach().clone();
  grpo_group g;
  for (int i = 0; i < 2; ++i) {
    grpo_sample s;
    s.prompt = {1, 2};
    s.completion = {3, 4, 5, 6};
    s.completion_mask = {1, 0, 0, 1};
    s.reward = i;  // different rewards: non-zero advantages
    g.samples.push_back(s);
  }
  grpo_step_options o;
  o.max_grad_norm = 0;
  o.lr = 1e-2;
  grpo_stepper st({logits}, o);
  const auto out = st.step({g}, [&](const std::vector<const grpo_sample*>& s) {
    return gather_completion_logp(logits, pack_sequences(s));
  }, {}, 0.0, 0);
  REQUIRE(out.stepped);
  CHECK(out.loss.tokens == 4);  // two trained tokens of each sample
  const auto moved = (logits.detach() - before).abs().sum(-1);  // [2, 6]
  for (int r = 0; r < 2; ++r) {
    CHECK(moved[r][0].item<double>() == 0);  // predicts a prompt token
    CHECK(moved[r][1].item<double>() > 0);   // the first turn's token 3
    CHECK(moved[r][2].item<double>() == 0);  // the observation's 4
    CHECK(moved[r][3].item<double>() == 0);  // the observation's 5
    CHECK(moved[r][4].item<double>() > 0);   // the next turn's token 6
  }
}

TEST_CASE("split_by_turn: one sample a turn, ending with it, masked to it, rewarded with its return") {
  // Completion: turn 1 {3, 4}, observation {5}, turn 2 {6}, observation {7, 8}, turn 3 {9, 10}.
  grpo_sample e;
  e.prompt = {1, 2};
  e.completion = {3, 4, 5, 6, 7, 8, 9, 10};
  e.completion_mask = {1, 1, 0, 1, 0, 0, 1, 1};
  e.behaviour_logp = {-1, -2, 0, -3, 0, 0, -4, -5};
  e.policy_version = 4;
  e.reward = 9;  // the episode's own reward is not used
  const auto turns = split_by_turn(e, {1.08, 0.2, 0.5});
  REQUIRE(turns.size() == 3);
  for (const auto& t : turns) {
    CHECK(t.prompt == e.prompt);
    CHECK(t.policy_version == 4);
  }
  CHECK(turns[0].completion == std::vector<std::int64_t>{3, 4});
  CHECK(turns[0].completion_mask == std::vector<std::uint8_t>{1, 1});
  CHECK(turns[0].behaviour_logp == std::vector<float>{-1, -2});
  CHECK(turns[0].reward == 1.08);
  CHECK(turns[1].completion == std::vector<std::int64_t>{3, 4, 5, 6});
  CHECK(turns[1].completion_mask == std::vector<std::uint8_t>{0, 0, 0, 1});
  CHECK(turns[1].reward == 0.2);
  CHECK(turns[2].completion == e.completion);
  CHECK(turns[2].completion_mask == std::vector<std::uint8_t>{0, 0, 0, 0, 0, 0, 1, 1});
  CHECK(turns[2].behaviour_logp == e.behaviour_logp);
  CHECK(turns[2].reward == 0.5);

  // An episode ended on an observation (its last turn could not be generated): no sample for it.
  grpo_sample ended = e;
  ended.completion = {3, 4, 5};
  ended.completion_mask = {1, 1, 0};
  ended.behaviour_logp = {-1, -2, 0};
  const auto two = split_by_turn(ended, {0.4, 0.0});
  REQUIRE(two.size() == 1);
  CHECK(two[0].reward == 0.4);
  // Turns that do not match the returns: nothing (the caller trains the episode whole).
  CHECK(split_by_turn(e, {1.0, 0.5}).empty());                    // a turn fewer, not ended
  CHECK(split_by_turn(e, {1.0, 0.5, 0.2, 0.1}).empty());          // a turn more
  grpo_sample bad = e;
  bad.behaviour_logp.pop_back();
  CHECK(split_by_turn(bad, {1.08, 0.2, 0.5}).empty());            // log-probs do not fit
}

TEST_CASE("token_logprobs: log_softmax + gather's values and gradients, chunk by chunk") {
  torch::manual_seed(3);
  for (auto dtype : {torch::kFloat, torch::kBFloat16})
    for (double temperature : {1.0, 0.7}) {
      CAPTURE(temperature);
      const auto base = (torch::randn({37, 53}) * 3).to(dtype);
      const auto targets = torch::randint(53, {37}, torch::kLong);
      const auto upstream = torch::randn({37});
      // The plain way: the fp32 log-softmax over the whole vocabulary, then the targets.
      auto a = base.clone().set_requires_grad(true);
      const auto want = torch::log_softmax(a.to(torch::kFloat) / temperature, -1).gather(1, targets.unsqueeze(1)).squeeze(1);
      (want * upstream).sum().backward();
      // In chunks of 8 rows (the last one 5), the softmax recomputed in backward.
      auto b = base.clone().set_requires_grad(true);
      const auto got = token_logprobs(b, targets, temperature, 8);
      (got * upstream).sum().backward();
      CHECK((got.scalar_type() == torch::kFloat));
      CHECK((got - want).abs().max().item<double>() < 1e-5);
      CHECK((b.grad().scalar_type() == dtype));
      const double grad_diff = (b.grad().to(torch::kFloat) - a.grad().to(torch::kFloat)).abs().max().item<double>();
      MESSAGE("dtype " << dtype << ": max gradient difference " << grad_diff);
      CHECK(grad_diff < (dtype == torch::kFloat ? 1e-5 : 1e-2));
    }
  CHECK_THROWS_AS(token_logprobs(torch::zeros({2, 3}), torch::zeros({3}, torch::kLong)), std::invalid_argument);
}

TEST_CASE("grpo step, sharded over bf16 weights: a step that failed midway leaves nothing summed for the next") {
  torch::manual_seed(6);
  Bigram a, b;
  copy_weights(a, b);
  const auto batch = sample_batch(a, {0, 1, 2}, 4, 5, 0);
  a->to(torch::kBFloat16);
  b->to(torch::kBFloat16);
  grpo_step_options o;
  o.lr = 1e-2;
  o.micro_batch_size = 2;  // 12 samples: 6 micro-batches, each summed into the fp32 shard
  const auto stepper = [&](Bigram& m) {
    sharded_adamw_options so;
    so.lr = o.lr;
    auto sharded = std::make_unique<sharded_adamw>(m->parameters(), nullptr, so);
    return grpo_stepper(m->parameters(), o, std::move(sharded));
  };
  auto failed = stepper(a), clean = stepper(b);
  REQUIRE(failed.sharded()->sums_each_micro_batch());
  int calls = 0;
  const logprob_fn fails_third = [&](const std::vector<const grpo_sample*>& s) {
    if (++calls == 3) throw std::runtime_error("out of memory, say");
    return logprobs_of(a)(s);
  };
  CHECK_THROWS_AS(failed.step(batch, fails_third, {}, 0.0, 0), std::runtime_error);
  const auto sa = failed.step(batch, logprobs_of(a), {}, 0.0, 0);
  const auto sb = clean.step(batch, logprobs_of(b), {}, 0.0, 0);
  REQUIRE(sa.stepped);
  CHECK(sa.grad_norm == sb.grad_norm);
  auto pa = a->parameters(), pb = b->parameters();
  for (size_t i = 0; i < pa.size(); ++i) CHECK(torch::equal(pa[i], pb[i]));
}

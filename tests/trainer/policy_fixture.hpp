#pragma once
// What the policy-trainer tests share (CPU: policy_trainer_test.cpp; GPU: dp_gpu_test.cpp): the
// fixture tiny Qwen2 (tests/model/fixtures/qwen2, 2 layers, hidden 64, vocab 512) as a trainable
// policy, batches sampled from it with a synthetic reward, and data-parallel ranks on threads.
#include <ATen/ATen.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../model/test_files.hpp"
#include "model/generate.hpp"
#include "model/weights.hpp"
#include "trainer/collective.hpp"
#include "trainer/policy_trainer.hpp"
#include "tests/doctest_torch.hpp"  // last: after every header that may include LibTorch

namespace kforge::trainer::testing {

inline const std::string qwen2_dir = std::string(KFORGE_MODEL_FIXTURES) + "/qwen2";

inline model::CausalLM load_policy(at::Device device = at::kCPU) {
  model::load_options lo;
  lo.device = device;
  auto m = model::load_causal_lm(qwen2_dir, lo);
  REQUIRE_MESSAGE(m.ok(), (m.ok() ? "" : m.message()));
  for (auto& p : (*m)->parameters()) p.set_requires_grad(true);
  return std::move(*m);
}

/// `g` completions of `max_new` tokens per prompt sampled from the trainer's policy, rewarded with
/// the fraction of `target` tokens (target < 0: of even tokens, a reward almost every group varies
/// in), tagged with the current version, as the sampler would send them.
inline train_batch sample_batch(policy_trainer& t, const std::vector<std::vector<std::int64_t>>& prompts,
                                std::int64_t g, std::int64_t max_new, std::uint64_t seed, std::int64_t target) {
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

inline const std::vector<std::vector<std::int64_t>> prompts{{1, 17, 42}, {1, 99}, {1, 250, 7, 3}, {1, 5}};

inline policy_trainer_options resume_options() {
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

/// Bit-identical parameters (on any devices).
inline bool same_weights(const model::CausalLM& a, const model::CausalLM& b) {
  const auto pa = a->named_parameters(), pb = b->named_parameters();
  bool same = pa.size() == pb.size();
  for (const auto& item : pa) same = same && at::equal(item.value().cpu(), pb[item.key()].cpu());
  return same;
}

inline double max_weight_diff(const model::CausalLM& a, const model::CausalLM& b) {
  double worst = 0;
  const auto pb = b->named_parameters();
  for (const auto& item : a->named_parameters())
    worst = std::max(worst, (item.value().cpu() - pb[item.key()].cpu()).abs().max().item<double>());
  return worst;
}

/// Data-parallel ranks on threads: rank r joins its group (`join(r)`, on its thread: an NCCL join
/// blocks until every rank joins), loads the policy onto `device(r)` and steps through `batches`.
struct rank_run {
  std::vector<std::unique_ptr<policy_trainer>> trainers;
  std::vector<std::vector<policy_step_stats>> stats;
  std::vector<std::string> errors;
};

inline rank_run run_ranks(int ranks, const policy_trainer_options& base, const std::vector<train_batch>& batches,
                          const std::function<std::shared_ptr<collective>(int)>& join,
                          const std::function<at::Device(int)>& device) {
  rank_run run;
  const auto n = static_cast<std::size_t>(ranks);
  run.trainers.resize(n);
  run.stats.resize(n);
  run.errors.resize(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      const auto i = static_cast<std::size_t>(r);
      auto o = base;
      o.group = join(r);
      if (!o.group) {
        run.errors[i] = "rank " + std::to_string(r) + " could not join its group";
        return;
      }
      model::load_options lo;
      lo.device = device(r);
      auto m = model::load_causal_lm(qwen2_dir, lo);
      if (!m) {
        run.errors[i] = m.message();
        return;
      }
      for (auto& p : (*m)->parameters()) p.set_requires_grad(true);
      run.trainers[i] = std::make_unique<policy_trainer>(std::move(*m), o);
      for (const auto& b : batches) {
        auto st = run.trainers[i]->step(b);
        if (!st) {
          run.errors[i] = st.message();
          return;
        }
        run.stats[i].push_back(*st);
      }
    });
  for (auto& t : threads) t.join();
  return run;
}

}  // namespace kforge::trainer::testing

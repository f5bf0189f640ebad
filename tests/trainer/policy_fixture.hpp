#pragma once
// What the policy-trainer tests share (CPU: policy_trainer_test.cpp; GPU: dp_gpu_test.cpp): the
// fixture tiny Qwen2 (tests/model/fixtures/qwen2, 2 layers, hidden 64, vocab 512) as a trainable
// policy, batches sampled from it with a synthetic reward, data-parallel groups of it, and the
// skip of the two-GPU tests.
#include <ATen/ATen.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "../model/test_files.hpp"
#include "model/generate.hpp"
#include "model/weight_diff.hpp"
#include "model/weights.hpp"
#include "trainer/data_parallel_trainer.hpp"
#include "trainer/policy_trainer.hpp"
#include "tests/doctest_torch.hpp"  // last: after every header that may include LibTorch

namespace kforge::trainer::testing {

inline const std::string qwen2_dir = std::string(KFORGE_MODEL_FIXTURES) + "/qwen2";

/// GPU tests of two ranks: skip (exit 77, ctest's skip code) with fewer than 2 GPUs, saying why.
inline void require_two_gpus(const char* what) {
  const auto n = torch::cuda::is_available() ? torch::cuda::device_count() : 0;
  if (n < 2) {
    std::printf("SKIP: %s needs 2 GPUs, LibTorch sees %zu (run on the 2-GPU host kind)\n", what,
                static_cast<std::size_t>(n));
    std::exit(77);
  }
}

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
  return model::max_weight_difference(*a, *b);
}

/// A data-parallel group of the fixture policy (trainer/data_parallel_trainer.hpp), one rank per
/// device, stepped through `batches`: the group and rank 0's statistics per step. REQUIREs that the
/// group was built and that every rank made every step.
struct group_run {
  std::unique_ptr<data_parallel_trainer> group;
  std::vector<policy_step_stats> stats;
};

/// The fixture policy trained with `o`, one rank per device (data_parallel_trainer::create's options).
inline data_parallel_options group_options(const std::vector<at::Device>& devices, const policy_trainer_options& o) {
  data_parallel_options dp;
  dp.model_dir = qwen2_dir;
  dp.devices = devices;
  dp.trainer = o;
  return dp;
}

inline group_run train_group(const std::vector<at::Device>& devices, const policy_trainer_options& o,
                             const std::vector<train_batch>& batches) {
  auto g = data_parallel_trainer::create(group_options(devices, o));
  REQUIRE_MESSAGE(g.ok(), (g.ok() ? "" : g.message()));
  group_run run{std::move(*g), {}};
  for (const auto& b : batches) {
    auto st = run.group->step(b);
    REQUIRE_MESSAGE(st.ok(), (st.ok() ? "" : st.message()));
    run.stats.push_back(*st);
  }
  return run;
}

/// Every rank's weights equal rank 0's, bit for bit.
inline bool ranks_identical(data_parallel_trainer& g) {
  bool same = true;
  for (int r = 1; r < g.ranks(); ++r) same = same && same_weights(g.rank(r).policy(), g.lead().policy());
  return same;
}

}  // namespace kforge::trainer::testing

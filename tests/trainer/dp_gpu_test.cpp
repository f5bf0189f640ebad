// Data parallel over NCCL on the GPU host: two ranks, one per GPU, each a thread of this
// process with its own trainer, joined by an NCCL unique id the way a run's ranks are. They must
// end with identical weights, equal (within rounding) to one rank training on the whole batch on
// GPU 0, and a broadcast from rank 0 must reach rank 1. Skips (exit 77) with fewer than 2 GPUs.
#include <ATen/ATen.h>
#include <torch/cuda.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "trainer/nccl_group.hpp"
#include "tests/trainer/policy_fixture.hpp"  // includes doctest last, after LibTorch

using namespace kforge;
using namespace kforge::trainer;
using namespace kforge::trainer::testing;

TEST_CASE("NCCL data parallel: 2 ranks on 2 GPUs train like 1 rank on the whole batch") {
  require_two_gpus("data parallel over NCCL");
  const at::Device gpu0(at::kCUDA, 0);
  policy_trainer source(load_policy(gpu0), resume_options());
  std::vector<train_batch> batches;
  for (std::uint64_t i = 0; i < 3; ++i) batches.push_back(sample_batch(source, prompts, 4, 5, 100 + i, -1));

  const auto opts = resume_options();
  policy_trainer single(load_policy(gpu0), opts);
  std::vector<policy_step_stats> single_stats;
  for (const auto& b : batches) {
    auto st = single.step(b);
    REQUIRE_MESSAGE(st.ok(), (st.ok() ? "" : st.message()));
    single_stats.push_back(*st);
  }

  // Through the data-parallel trainer, as the trainer stage runs it: an NCCL group over GPUs 0, 1.
  auto run = train_group({at::Device(at::kCUDA, 0), at::Device(at::kCUDA, 1)}, opts, batches);
  REQUIRE(run.group->ranks() == 2);
  CHECK(ranks_identical(*run.group));
  const double diff = max_weight_diff(run.group->lead().policy(), single.policy());
  std::printf("nccl data parallel: 2 ranks vs 1 rank, max |weight difference| %.3g after %zu steps\n", diff,
              batches.size());
  CHECK(diff < 1e-4);
  CHECK(max_weight_diff(single.policy(), single.reference()) > 1e-3);
  for (std::size_t i = 0; i < batches.size(); ++i) {
    CHECK(run.stats[i].grpo.loss.tokens == single_stats[i].grpo.loss.tokens);
    CHECK(run.stats[i].grpo.grad_norm == doctest::Approx(single_stats[i].grpo.grad_norm).epsilon(1e-4));
  }
}

TEST_CASE("NCCL group: broadcast from rank 0 reaches rank 1; a CPU tensor is an error, not a hang") {
  require_two_gpus("data parallel over NCCL");
  auto id = new_nccl_id();
  REQUIRE(id.ok());
  std::vector<at::Tensor> got(2);
  std::vector<std::string> errors(2), cpu_errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      const auto i = static_cast<std::size_t>(r);
      auto g = make_nccl_group(*id, r, 2, r);
      if (!g) {
        errors[i] = g.message();
        return;
      }
      const auto opts = at::TensorOptions().device(at::kCUDA, r).dtype(at::kBFloat16);
      at::Tensor w = r == 0 ? at::arange(1000, opts) : at::zeros({1000}, opts);
      if (auto s = (*g)->broadcast({w}, 0); !s) errors[i] = s.message();
      got[i] = w.cpu();
      auto s = (*g)->all_reduce_sum({at::zeros({4})});
      cpu_errors[i] = s ? "" : s.message();
    });
  for (auto& t : threads) t.join();
  for (const auto& e : errors) CHECK_MESSAGE(e.empty(), e);
  CHECK(at::equal(got[0], got[1]));
  CHECK(got[1].to(at::kFloat).sum().item<double>() > 0);
  for (const auto& e : cpu_errors) CHECK(e.find("must be a contiguous tensor on cuda:") != std::string::npos);
}

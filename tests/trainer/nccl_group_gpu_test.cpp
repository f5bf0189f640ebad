// The data-parallel NCCL group's waits on one GPU: a group of one rank works through the
// non-blocking communicator (its calls and its background sums), and a join that another rank never makes ends after the timeout, or
// sooner when give_up says so, instead of hanging. And the gradient reducer on the GPU, driven
// directly through a one-rank group that sums in the background (as process ranks do). (A rank dying inside a collective needs two
// GPUs: dp_gpu_test.cpp.) Skips (exit 77) without a GPU.
#include <ATen/ATen.h>
#include <torch/cuda.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "trainer/gradient_reducer.hpp"
#include "trainer/nccl_group.hpp"
#include "tests/trainer/policy_fixture.hpp"  // includes doctest last, after LibTorch

using namespace kforge::trainer;
using namespace kforge::trainer::testing;
using clock_type = std::chrono::steady_clock;

namespace {
void require_gpu() {
  if (!torch::cuda::is_available()) {
    std::printf("SKIP: the NCCL group needs a GPU (GPU tests run on the GPU host: deploy/gpu-host.sh)\n");
    std::exit(77);
  }
}
double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}
}  // namespace

TEST_CASE("NCCL group of one rank: all-reduce and broadcast through the non-blocking communicator") {
  require_gpu();
  auto id = new_nccl_id();
  REQUIRE(id.ok());
  auto g = make_nccl_group(*id, 0, 1, 0);
  REQUIRE_MESSAGE(g.ok(), (g.ok() ? "" : g.message()));
  const auto opts = at::TensorOptions().device(at::kCUDA, 0);
  at::Tensor a = at::arange(1 << 20, opts.dtype(at::kFloat));
  at::Tensor b = at::ones({3, 5}, opts.dtype(at::kBFloat16));
  const at::Tensor a0 = a.clone(), b0 = b.clone();
  auto s = (*g)->all_reduce_sum({a, b});
  REQUIRE_MESSAGE(s.ok(), (s.ok() ? "" : s.message()));
  CHECK(at::equal(a, a0));
  CHECK(at::equal(b, b0));
  s = (*g)->broadcast({a}, 0);
  REQUIRE_MESSAGE(s.ok(), (s.ok() ? "" : s.message()));
  CHECK(at::equal(a, a0));

  // Background sums (the gradient reducer's) on the group's own stream, after the default
  // stream's work: a value written just before is what gets summed, and is seen after the wait.
  a.mul_(2);
  s = (*g)->all_reduce_sum_start({a});
  REQUIRE_MESSAGE(s.ok(), (s.ok() ? "" : s.message()));
  s = (*g)->all_reduce_sum_start({b});
  REQUIRE_MESSAGE(s.ok(), (s.ok() ? "" : s.message()));
  s = (*g)->wait_started();
  REQUIRE_MESSAGE(s.ok(), (s.ok() ? "" : s.message()));
  CHECK(at::equal(a, a0 * 2));
  CHECK(at::equal(b, b0));
  s = (*g)->all_reduce_sum_start({a});  // a call while one is started waits for it first
  REQUIRE(s.ok());
  s = (*g)->all_reduce_sum({b});
  REQUIRE_MESSAGE(s.ok(), (s.ok() ? "" : s.message()));
  CHECK(at::equal(a, a0 * 2));
}

TEST_CASE("NCCL group: a rank that never joins fails the join after the timeout, or at give_up") {
  require_gpu();
  auto id = new_nccl_id();
  REQUIRE(id.ok());
  nccl_group_options o;
  o.join_timeout = std::chrono::milliseconds(3000);
  auto t0 = clock_type::now();
  auto g = make_nccl_group(*id, 0, 2, 0, o);  // rank 1 never comes
  const double waited = seconds_since(t0);
  REQUIRE_FALSE(g.ok());
  std::printf("nccl group: join without rank 1 failed after %.1f s: %s\n", waited, g.message().c_str());
  CHECK(g.message().find("did not join within 3000 ms") != std::string::npos);
  CHECK(waited >= 2.9);
  CHECK(waited < 30);

  auto id2 = new_nccl_id();
  REQUIRE(id2.ok());
  o.join_timeout = std::chrono::minutes(10);
  t0 = clock_type::now();
  o.give_up = [t0] { return seconds_since(t0) > 1.0; };  // as if rank 0's driver saw rank 1 die
  g = make_nccl_group(*id2, 0, 2, 0, o);
  const double gave_up = seconds_since(t0);
  REQUIRE_FALSE(g.ok());
  CHECK(g.message().find("aborted while joining") != std::string::npos);
  CHECK(gave_up < 30);
}

TEST_CASE("gradient reducer on the GPU: hooks on a real backward pass fill and start buckets during it, sums written back") {
  // A one-rank group that sums in the background, as a rank process's group does. (A GRPO step
  // never uses the reducer for one rank, since there is nothing to sum; the two-rank step through
  // it is dp_gpu_test.cpp's.) With one rank the sum is the gradient itself, so what must hold is
  // that the hooks see every gradient of a real backward pass on the GPU and that the buckets
  // summed on the group's own stream come back into the gradients.
  require_gpu();
  const at::Device gpu0(at::kCUDA, 0);
  auto id = new_nccl_id();
  REQUIRE(id.ok());
  nccl_group_options go;
  go.background_sums = true;
  auto g = make_nccl_group(*id, 0, 1, 0, go);
  REQUIRE_MESSAGE(g.ok(), (g.ok() ? "" : g.message()));
  REQUIRE((*g)->sums_in_background());
  auto policy = load_policy(gpu0);
  std::vector<at::Tensor> params;
  for (auto& p : policy->parameters()) params.push_back(p);
  const auto ids = at::randint(0, 500, {4, 24}, at::TensorOptions().device(gpu0).dtype(at::kLong));
  auto backward = [&] {
    for (auto& p : params) p.mutable_grad() = at::Tensor();
    const auto logits = policy->forward(ids);
    (logits.to(at::kFloat).pow(2).mean()).backward();
  };
  backward();
  std::vector<at::Tensor> plain;
  for (auto& p : params) plain.push_back(p.grad().defined() ? p.grad().clone() : at::zeros_like(p));

  gradient_reducer reducer(params, params, **g, /*bucket_bytes=*/16u << 10);
  for (int step = 0; step < 3; ++step) {
    CAPTURE(step);
    reducer.arm();
    backward();
    auto s = reducer.finish();
    REQUIRE_MESSAGE(s.ok(), (s.ok() ? "" : s.message()));
    // Within rounding, not bitwise: a backward pass on the GPU may add in another order each time
    // (atomics); a bucket written before its gradient was final, or summed before it was written,
    // is off by the whole gradient.
    std::size_t same = 0, close = 0;
    for (std::size_t i = 0; i < params.size(); ++i) {
      same += at::equal(params[i].grad(), plain[i]);
      close += at::allclose(params[i].grad(), plain[i], 1e-5, 1e-7);
    }
    CHECK(close == params.size());
    CHECK(reducer.started_early() > 0);
    std::printf("gradient reducer on cuda:0, step %d: of %zu parameters' gradients %zu bit-identical, %zu within rounding; %zu buckets started in backward\n",
                step, params.size(), same, close, reducer.started_early());
  }
}

// The data-parallel NCCL group's waits on one GPU (issue 6): a group of one rank works through the
// non-blocking communicator (its calls and its background sums), and a join that another rank never makes ends after the timeout, or
// sooner when give_up says so, instead of hanging. (A rank dying inside a collective needs two
// GPUs: dp_gpu_test.cpp.) Skips (exit 77) without a GPU.
#include <ATen/ATen.h>
#include <torch/cuda.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "trainer/nccl_group.hpp"

#include <doctest/doctest.h>  // after LibTorch

using namespace kforge::trainer;
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

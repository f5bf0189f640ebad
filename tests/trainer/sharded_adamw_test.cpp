// trainer/sharded_adamw.hpp: AdamW with its state sharded over CPU ranks (thread and socket
// groups) takes the step the unsharded optimiser takes — gradients summed over the ranks, clipped,
// torch::optim::AdamW — and resumes from per-rank shard files.
#include <ATen/ATen.h>
#include <torch/optim/adamw.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "trainer/checkpoint.hpp"
#include "trainer/collective.hpp"
#include "trainer/sharded_adamw.hpp"
#include "trainer/socket_group.hpp"
#include "tests/doctest_torch.hpp"  // last: after every header that may include LibTorch

using namespace kforge::trainer;
namespace fs = std::filesystem;

namespace {

// 41 elements: divisible by neither 2 nor 3 ranks, and none of the parameters is either.
const std::vector<std::vector<std::int64_t>> shapes{{7, 3}, {5}, {11}, {2, 2}};

std::vector<at::Tensor> initial_params() {
  std::vector<at::Tensor> out;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    at::Tensor t = at::empty(shapes[i], at::kFloat);
    t.view(-1).copy_(at::cos(at::arange(t.numel(), at::kFloat) * 0.7 + static_cast<double>(i)) * 0.5);
    out.push_back(t);
  }
  return out;
}

// Rank r's gradient of parameter i at `step`: uneven across ranks, large enough on step 0 to be
// clipped, and none at all for parameter 1 on rank 1 (it then counts as zeros).
at::Tensor local_grad(int rank, int step, std::size_t i) {
  if (rank == 1 && i == 1) return {};
  const std::int64_t n = at::empty(shapes[i]).numel();
  const double scale = step == 0 ? 3.0 : 0.2;
  return (at::sin(at::arange(n, at::kFloat) * (1.0 + 0.37 * rank) + 0.5 * step + static_cast<double>(i)) * scale)
      .view(shapes[i]);
}

sharded_adamw_options options(double max_grad_norm = 1.0, std::size_t bucket_bytes = 48) {
  sharded_adamw_options o;
  o.lr = 0.05;  // large steps, so that a wrong update shows
  o.weight_decay = 0.01;
  o.max_grad_norm = max_grad_norm;
  o.bucket_bytes = bucket_bytes;  // 12 floats: several buckets, a parameter per bucket for the largest
  return o;
}

// The unsharded step: the ranks' gradients summed in rank order (as all_reduce_gradients sums
// them), clipped as grpo_step clips, then LibTorch's AdamW.
std::vector<at::Tensor> unsharded(int ranks, int steps, const sharded_adamw_options& o) {
  std::vector<at::Tensor> params = initial_params();
  for (auto& p : params) p.set_requires_grad(true);
  torch::optim::AdamW adamw(params, torch::optim::AdamWOptions(o.lr)
                                        .betas(std::make_tuple(o.beta1, o.beta2))
                                        .eps(o.eps)
                                        .weight_decay(o.weight_decay));
  for (int s = 0; s < steps; ++s) {
    for (std::size_t i = 0; i < params.size(); ++i) {
      at::Tensor sum = at::zeros(shapes[i], at::kFloat);
      for (int r = 0; r < ranks; ++r)
        if (at::Tensor g = local_grad(r, s, i); g.defined()) sum = r == 0 ? g.clone() : sum.add_(g);
      params[i].mutable_grad() = sum;
    }
    std::vector<at::Tensor> norms;
    for (const auto& p : params) norms.push_back(p.grad().norm(2).to(at::kDouble));
    const double total = at::stack(norms).norm(2).item<double>();
    const double max_norm = o.max_grad_norm > 0 ? o.max_grad_norm : INFINITY;
    if (total > max_norm)
      for (auto& p : params) p.grad().mul_(max_norm / (total + 1e-6));
    adamw.step();
  }
  for (auto& p : params) p = p.detach();
  return params;
}

using body_fn = std::function<void(int, std::shared_ptr<collective>)>;

void on_thread_ranks(int size, const body_fn& body) {
  auto group = make_thread_group(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) threads.emplace_back([&, r] { body(r, group[static_cast<std::size_t>(r)]); });
  for (auto& t : threads) t.join();
}

void on_socket_ranks(int size, const body_fn& body) {
  static std::atomic<int> n{0};
  const std::string endpoint = "ipc:///tmp/kforge-sharded-adamw-" + std::to_string(::getpid()) + "-" + std::to_string(n++) + ".sock";
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r] {
      auto g = make_socket_group(endpoint, r, size, std::chrono::seconds(20));
      REQUIRE_MESSAGE(g.ok(), g.message());
      body(r, *g);
    });
  for (auto& t : threads) t.join();
}

// `steps` sharded steps (from `from`, 0 for a fresh start) on rank r's parameters.
std::string run_steps(sharded_adamw& opt, std::vector<at::Tensor>& params, int rank, int from, int steps,
                      bool opt_clips = true) {
  for (int s = from; s < from + steps; ++s) {
    for (std::size_t i = 0; i < params.size(); ++i) params[i].mutable_grad() = local_grad(rank, s, i);
    auto st = opt.step();
    if (!st) return st.message();
    if (!st->stepped) return "did not step";
    if (s == 0 && opt_clips && !st->grad_clipped) return "step 0 was not clipped";
  }
  return {};
}

// Per tensor, the largest difference relative to the tensor's largest value; the worst tensor.
// (Elementwise, a weight that passes near zero would magnify the rounding of the clip scale.)
double max_relative_difference(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>() / b[i].abs().max().item<double>());
  return worst;
}

// Every rank's parameters after `steps` sharded steps.
std::vector<std::vector<at::Tensor>> sharded(int ranks, int steps, const sharded_adamw_options& o,
                                             const std::function<void(int, const body_fn&)>& on_ranks) {
  std::vector<std::vector<at::Tensor>> out(static_cast<std::size_t>(ranks));
  std::vector<std::string> errors(static_cast<std::size_t>(ranks));
  on_ranks(ranks, [&](int r, std::shared_ptr<collective> g) {
    const auto i = static_cast<std::size_t>(r);
    std::vector<at::Tensor> params = initial_params();
    sharded_adamw opt(params, g, o);
    errors[i] = run_steps(opt, params, r, 0, steps, o.max_grad_norm > 0);
    out[i] = params;
  });
  for (const auto& e : errors) REQUIRE_MESSAGE(e.empty(), e);
  return out;
}

}  // namespace

TEST_CASE("sharded AdamW: buckets split uneven parameter counts into padded chunks") {
  const auto params = initial_params();
  for (int ranks : {1, 2, 3}) {
    const auto buckets = shard_buckets(params, ranks, 48);
    // 21 elements alone (over 12 floats), then 5 (5 + 11 > 12), 11, 4.
    REQUIRE(buckets.size() == 4);
    std::int64_t numel = 0;
    for (const auto& b : buckets) {
      CHECK(b.chunk * ranks >= b.numel);
      CHECK(b.chunk * ranks < b.numel + ranks);
      numel += b.numel;
    }
    CHECK(numel == 41);
    CHECK(buckets[0].chunk == (21 + ranks - 1) / ranks);
  }
  const auto one = shard_buckets(params, 3, 1 << 20);
  REQUIRE(one.size() == 1);
  CHECK(one[0].chunk == 14);  // 41 padded to 42
  sharded_adamw opt(initial_params(), make_thread_group(3)[1], options(1.0, 1 << 20));
  CHECK(opt.shard_numel() == 14);
  CHECK(opt.total_numel() == 41);
}

TEST_CASE("sharded AdamW: one rank is LibTorch's AdamW bit for bit") {
  const auto o = options(/*max_grad_norm=*/0);
  const auto want = unsharded(1, 4, o);
  const auto got = sharded(1, 4, o, on_thread_ranks);
  for (std::size_t i = 0; i < want.size(); ++i) CHECK(at::equal(got[0][i], want[i]));
}

TEST_CASE("sharded AdamW over 2 and 3 thread ranks: the unsharded step's parameters after several steps") {
  for (int ranks : {2, 3}) {
    for (std::size_t bucket_bytes : {std::size_t{48}, std::size_t{1} << 20}) {
      CAPTURE(ranks);
      CAPTURE(bucket_bytes);
      const auto o = options(1.0, bucket_bytes);
      const auto want = unsharded(ranks, 5, o);
      const auto got = sharded(ranks, 5, o, on_thread_ranks);
      for (int r = 0; r < ranks; ++r) {
        CAPTURE(r);
        CHECK(max_relative_difference(got[static_cast<std::size_t>(r)], want) <= 1e-6);
        for (std::size_t i = 0; i < want.size(); ++i) CHECK(at::equal(got[static_cast<std::size_t>(r)][i], got[0][i]));
      }
      // The steps did move the weights (a no-op would pass the comparison against itself).
      CHECK(max_relative_difference(want, initial_params()) > 1e-2);
    }
  }
}

TEST_CASE("sharded AdamW over 3 socket ranks: the same parameters as over thread ranks, bit for bit") {
  const auto o = options();
  const auto threads = sharded(3, 4, o, on_thread_ranks);
  const auto sockets = sharded(3, 4, o, on_socket_ranks);
  const auto want = unsharded(3, 4, o);
  for (std::size_t r = 0; r < 3; ++r) {
    CHECK(max_relative_difference(sockets[r], want) <= 1e-6);
    for (std::size_t i = 0; i < want.size(); ++i) CHECK(at::equal(sockets[r][i], threads[r][i]));
  }
}

TEST_CASE("sharded AdamW: a non-finite gradient on one rank steps no rank") {
  std::vector<std::string> errors(2);
  std::vector<std::vector<at::Tensor>> after(2);
  on_thread_ranks(2, [&](int r, std::shared_ptr<collective> g) {
    std::vector<at::Tensor> params = initial_params();
    sharded_adamw opt(params, g, options());
    for (std::size_t i = 0; i < params.size(); ++i) params[i].mutable_grad() = local_grad(r, 1, i);
    if (r == 1) params[2].mutable_grad()[3] = NAN;
    auto st = opt.step();
    if (!st) errors[static_cast<std::size_t>(r)] = st.message();
    else if (st->stepped || std::isfinite(st->grad_norm)) errors[static_cast<std::size_t>(r)] = "stepped";
    after[static_cast<std::size_t>(r)] = params;
    if (opt.steps() != 0) errors[static_cast<std::size_t>(r)] += " counted a step";
  });
  const auto start = initial_params();
  for (std::size_t r = 0; r < 2; ++r) {
    CHECK_MESSAGE(errors[r].empty(), errors[r]);
    for (std::size_t i = 0; i < start.size(); ++i) CHECK(at::equal(after[r][i], start[i]));
  }
}

TEST_CASE("sharded AdamW: each rank's shard file resumes the run bit for bit; another rank count is refused") {
  const fs::path dir = fs::temp_directory_path() / ("kforge-sharded-adamw-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const int ranks = 2;
  const auto o = options();
  const auto straight = sharded(ranks, 4, o, on_thread_ranks);

  std::vector<std::string> errors(ranks);
  on_thread_ranks(ranks, [&](int r, std::shared_ptr<collective> g) {
    std::vector<at::Tensor> params = initial_params();
    sharded_adamw opt(params, g, o);
    errors[static_cast<std::size_t>(r)] = run_steps(opt, params, r, 0, 2);
    if (auto s = opt.save_state((dir / sharded_optimizer_file(r, ranks)).string()); !s)
      errors[static_cast<std::size_t>(r)] += s.message();
  });
  for (const auto& e : errors) REQUIRE_MESSAGE(e.empty(), e);
  CHECK(fs::exists(dir / "optimizer-rank-0-of-2.pt"));
  CHECK(fs::exists(dir / "optimizer-rank-1-of-2.pt"));

  std::vector<std::vector<at::Tensor>> resumed(ranks);
  on_thread_ranks(ranks, [&](int r, std::shared_ptr<collective> g) {
    const auto i = static_cast<std::size_t>(r);
    // Fresh parameters as the run started: the master weights come from the shard files.
    std::vector<at::Tensor> params = initial_params();
    sharded_adamw opt(params, g, o);
    if (auto s = opt.load_state((dir / sharded_optimizer_file(r, ranks)).string()); !s) errors[i] += s.message();
    if (auto s = opt.gather_weights(); !s) errors[i] += s.message();
    if (opt.steps() != 2) errors[i] += " restored " + std::to_string(opt.steps()) + " steps";
    errors[i] += run_steps(opt, params, r, 2, 2);
    resumed[i] = params;
  });
  for (const auto& e : errors) CHECK_MESSAGE(e.empty(), e);
  for (std::size_t r = 0; r < ranks; ++r)
    for (std::size_t i = 0; i < straight[r].size(); ++i) CHECK(at::equal(resumed[r][i], straight[r][i]));

  // Rank 0 of 3 (other chunks) cannot take rank 0 of 2's shard; load_state makes no collective call.
  sharded_adamw three(initial_params(), make_thread_group(3)[0], o);
  auto s = three.load_state((dir / sharded_optimizer_file(0, 2)).string());
  REQUIRE_FALSE(s.ok());
  CHECK_MESSAGE(s.message().find("written by rank 0 of 2") != std::string::npos, s.message());
  CHECK_MESSAGE(s.message().find("same number of ranks") != std::string::npos, s.message());
  fs::remove_all(dir);
}

// The socket group (trainer/socket_group.hpp): ranks joined over ZeroMQ, here as threads of one
// process with a socket each, exactly as separate processes would use it.
#include <ATen/ATen.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "trainer/collective.hpp"
#include "trainer/socket_group.hpp"
#include "tests/doctest_torch.hpp"  // last: after every header that may include LibTorch

using namespace kforge::trainer;

namespace {

std::string fresh_endpoint() {
  static std::atomic<int> n{0};
  return "ipc:///tmp/kforge-socket-group-" + std::to_string(::getpid()) + "-" + std::to_string(n++) + ".sock";
}

/// Runs body(rank, group) for `size` ranks of one socket group, each on its own thread.
void on_socket_ranks(int size, const std::function<void(int, collective&)>& body,
                     std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  const std::string endpoint = fresh_endpoint();
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r] {
      auto g = make_socket_group(endpoint, r, size, timeout);
      REQUIRE_MESSAGE(g.ok(), g.message());
      body(r, **g);
    });
  for (auto& t : threads) t.join();
}

}  // namespace

TEST_CASE("socket group: sums and broadcasts reach every rank; mismatches are errors on all, no hang") {
  std::vector<std::string> errors(3), mismatch(3), bad_root(3), bad_dtype(3);
  std::vector<at::Tensor> sums(3), bcast(3), bcast0(3);
  on_socket_ranks(3, [&](int r, collective& g) {
    const auto i = static_cast<std::size_t>(r);
    CHECK(g.rank() == r);
    CHECK(g.size() == 3);
    at::Tensor x = at::full({4}, static_cast<double>(r + 1), at::kFloat);
    if (auto s = g.all_reduce_sum({x}); !s) errors[i] = s.message();
    sums[i] = x;
    at::Tensor y = at::full({2}, static_cast<double>(10 * r), at::kFloat);
    if (auto s = g.broadcast({y}, 2); !s) errors[i] += s.message();
    bcast[i] = y;
    at::Tensor w = at::full({3}, static_cast<double>(r + 5), at::kDouble);
    if (auto s = g.broadcast({w}, 0); !s) errors[i] += s.message();
    bcast0[i] = w;
    at::Tensor z = at::zeros({r == 1 ? 3 : 2});  // rank 1 disagrees on the shape
    auto s = g.all_reduce_sum({z});
    mismatch[i] = s ? "" : s.message();
    auto b = g.broadcast({y}, r == 2 ? 1 : 0);  // rank 2 names another root
    bad_root[i] = b ? "" : b.message();
    at::Tensor same_bytes = r == 1 ? at::zeros({2}, at::kInt) : at::zeros({2}, at::kFloat);  // as many bytes, another dtype
    auto d = g.all_reduce_sum({same_bytes});
    bad_dtype[i] = d ? "" : d.message();
    at::Tensor after = at::ones({1});  // the group still works after the errors
    if (auto s2 = g.all_reduce_sum({after}); !s2 || after.item<float>() != 3.0f) errors[i] += "sum after errors";
  });
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK_MESSAGE(errors[i].empty(), errors[i]);
    CHECK(at::equal(sums[i], at::full({4}, 6.0, at::kFloat)));
    CHECK(at::equal(bcast[i], at::full({2}, 20.0, at::kFloat)));
    CHECK(at::equal(bcast0[i], at::full({3}, 5.0, at::kDouble)));
    CHECK_MESSAGE(mismatch[i].find(R"(rank 1 passed tensors [{"dtype":"Float","sizes":[3]}], rank 0 [{"dtype":"Float","sizes":[2]}])") !=
                      std::string::npos,
                  mismatch[i]);
    CHECK_MESSAGE(bad_root[i].find("rank 2 names root 1, rank 0 names 0") != std::string::npos, bad_root[i]);
    CHECK_MESSAGE(bad_dtype[i].find(R"("dtype":"Int")") != std::string::npos, bad_dtype[i]);
  }
}

TEST_CASE("socket group: sums are bit-identical to the thread group's (rank-order additions)") {
  const int size = 3;
  // Drawn up front: the default generator is not for threads at once.
  std::vector<std::vector<at::Tensor>> drawn(size);
  at::manual_seed(100);
  for (int r = 0; r < size; ++r)
    for (int i = 0; i < 2; ++i) drawn[static_cast<std::size_t>(r)].push_back(at::randn({1000}, at::kFloat) * (r + 1) * 1e3);
  auto values = [&](int r, int i) { return drawn[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)].clone(); };
  std::vector<at::Tensor> by_socket(size), by_threads(size);
  on_socket_ranks(size, [&](int r, collective& g) {
    at::Tensor a = values(r, 0), b = values(r, 1).to(at::kBFloat16);
    REQUIRE(g.all_reduce_sum({a, b}).ok());
    by_socket[static_cast<std::size_t>(r)] = at::cat({a, b.to(at::kFloat)});
  });
  auto threads = make_thread_group(size);
  std::vector<std::thread> ts;
  for (int r = 0; r < size; ++r)
    ts.emplace_back([&, r] {
      at::Tensor a = values(r, 0), b = values(r, 1).to(at::kBFloat16);
      REQUIRE(threads[static_cast<std::size_t>(r)]->all_reduce_sum({a, b}).ok());
      by_threads[static_cast<std::size_t>(r)] = at::cat({a, b.to(at::kFloat)});
    });
  for (auto& t : ts) t.join();
  for (std::size_t r = 0; r < size; ++r) {
    CHECK(at::equal(by_socket[r], by_threads[0]));
    CHECK(at::equal(by_threads[r], by_threads[0]));
  }
}

TEST_CASE("socket group: a rank that never joins is an error naming it, after the timeout") {
  const auto t0 = std::chrono::steady_clock::now();
  auto g = make_socket_group(fresh_endpoint(), 0, 2, std::chrono::milliseconds(300));
  REQUIRE_FALSE(g.ok());
  CHECK_MESSAGE(g.message().find("rank(s) 1 did not take part") != std::string::npos, g.message());
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  auto lone = make_socket_group(fresh_endpoint(), 1, 2, std::chrono::milliseconds(300));
  REQUIRE_FALSE(lone.ok());
  CHECK_MESSAGE(lone.message().find("rank 0 at") != std::string::npos, lone.message());
  CHECK_FALSE(make_socket_group(fresh_endpoint(), 2, 2, std::chrono::seconds(1)).ok());
  // Rank 0's driver saw a rank process die: the wait ends at once, not at the timeout.
  const auto t1 = std::chrono::steady_clock::now();
  auto given_up = make_socket_group(fresh_endpoint(), 0, 2, std::chrono::minutes(5), [] { return true; });
  REQUIRE_FALSE(given_up.ok());
  CHECK_MESSAGE(given_up.message().find("given up") != std::string::npos, given_up.message());
  CHECK(std::chrono::steady_clock::now() - t1 < std::chrono::seconds(5));
}

TEST_CASE("socket group: reduce-scatter and all-gather, the chunks an all-reduce gives; mismatches fail every rank") {
  const int size = 3;
  std::vector<at::Tensor> inputs;  // made up front: odd values, so the order of additions shows
  at::manual_seed(7);
  for (int r = 0; r < size; ++r) inputs.push_back(at::randn({12}, at::kFloat) * std::pow(10.0, 3 * r));
  std::vector<at::Tensor> scattered(size), reduced(size), gathered(size);
  std::vector<std::string> errors(size), bad(size);
  on_socket_ranks(size, [&](int r, collective& g) {
    const auto i = static_cast<std::size_t>(r);
    at::Tensor out = at::empty({4}, at::kFloat);
    if (auto s = g.reduce_scatter_sum(inputs[i], out); !s) errors[i] += s.message();
    scattered[i] = out;
    at::Tensor all = inputs[i].clone();
    if (auto s = g.all_reduce_sum({all}); !s) errors[i] += s.message();
    reduced[i] = all;
    at::Tensor mine = at::full({2}, static_cast<double>(r + 1), at::kDouble);
    at::Tensor whole = at::zeros({2, 3}, at::kDouble);  // any shape of 3 x 2 elements
    if (auto s = g.all_gather(mine, whole); !s) errors[i] += s.message();
    gathered[i] = whole;
    at::Tensor wrong = at::empty({r == 2 ? 5 : 4}, at::kFloat);  // rank 2's output is too big
    auto s = g.reduce_scatter_sum(inputs[i], wrong);
    bad[i] = s ? "" : s.message();
    at::Tensor after = at::ones({1});  // the group still works after the error
    if (auto s2 = g.all_reduce_sum({after}); !s2 || after.item<float>() != 3.0f) errors[i] += "sum after errors";
  });
  for (std::size_t r = 0; r < size; ++r) {
    CHECK_MESSAGE(errors[r].empty(), errors[r]);
    // Rank r's chunk is bit for bit the all-reduce's: the same additions in the same order.
    CHECK(at::equal(scattered[r], reduced[r].narrow(0, 4 * static_cast<std::int64_t>(r), 4)));
    CHECK(at::equal(gathered[r].reshape(-1), at::tensor({1.0, 1.0, 2.0, 2.0, 3.0, 3.0}, at::kDouble)));
    CHECK_MESSAGE(bad[r].find("rank 2 passed tensors") != std::string::npos, bad[r]);
  }
}

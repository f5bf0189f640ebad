#include "trainer/collective.hpp"

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <sstream>
#include <string>

#include <ATen/ATen.h>

namespace kforge::trainer {

namespace {

// Whether `input` and `output` fit a reduce-scatter or all-gather of `ranks` ranks: `big` holds
// `ranks` chunks the size of `small`. Empty when they do.
std::string chunk_mismatch(const char* op, const at::Tensor& big, const at::Tensor& small, int ranks) {
  if (!big.defined() || !small.defined()) return std::string(op) + ": an undefined tensor";
  if (big.scalar_type() != small.scalar_type())
    return std::string(op) + ": input and output differ in dtype (" + c10::toString(big.scalar_type()) + " vs " +
           c10::toString(small.scalar_type()) + ")";
  if (!big.is_contiguous() || !small.is_contiguous()) return std::string(op) + ": tensors must be contiguous";
  if (big.numel() != small.numel() * ranks)
    return std::string(op) + ": " + std::to_string(big.numel()) + " elements are not " + std::to_string(ranks) +
           " chunks of " + std::to_string(small.numel());
  return {};
}

// What the ranks of a thread group share: the tensors each rank posted for the current call and a
// reusable barrier.
struct thread_group_state {
  explicit thread_group_state(int n)
      : size(n), posted(static_cast<std::size_t>(n)), roots(static_cast<std::size_t>(n)), failed(static_cast<std::size_t>(n)) {}

  // After every rank has recorded its part's outcome (between the two barriers): the first
  // failure of any rank, so that every rank fails a call together rather than some waiting.
  std::string any_failure() const {
    for (int r = 0; r < size; ++r)
      if (!failed[static_cast<std::size_t>(r)].empty())
        return r == 0 ? failed[0] : "rank " + std::to_string(r) + ": " + failed[static_cast<std::size_t>(r)];
    return {};
  }

  const int size;
  std::mutex m;
  std::condition_variable cv;
  int arrived = 0;
  std::uint64_t generation = 0;
  std::vector<const std::vector<at::Tensor>*> posted;
  std::vector<int> roots;
  std::vector<std::string> failed;  // per rank, for the current call: why its part failed ("" = ok)

  void barrier() {
    std::unique_lock<std::mutex> lock(m);
    const std::uint64_t gen = generation;
    if (++arrived == size) {
      arrived = 0;
      ++generation;
      cv.notify_all();
      return;
    }
    cv.wait(lock, [&] { return generation != gen; });
  }

  // Empty when every rank posted the same number of tensors with the same shapes and dtypes (all
  // ranks compute the same answer, so all of them fail together).
  std::string mismatch(const char* op) const {
    const auto& first = *posted[0];
    for (int r = 1; r < size; ++r) {
      const auto& other = *posted[static_cast<std::size_t>(r)];
      if (other.size() != first.size()) {
        std::ostringstream why;
        why << op << ": rank 0 passed " << first.size() << " tensors, rank " << r << " " << other.size();
        return why.str();
      }
      for (std::size_t i = 0; i < first.size(); ++i)
        if (!other[i].defined() || !first[i].defined() || other[i].sizes() != first[i].sizes() ||
            other[i].scalar_type() != first[i].scalar_type()) {
          std::ostringstream why;
          why << op << ": tensor " << i << " differs between rank 0 and rank " << r;
          if (other[i].defined() && first[i].defined())
            why << " (" << first[i].sizes() << " " << first[i].scalar_type() << " vs " << other[i].sizes() << " "
                << other[i].scalar_type() << ")";
          return why.str();
        }
    }
    return {};
  }
};

class thread_rank final : public collective {
 public:
  thread_rank(std::shared_ptr<thread_group_state> state, int rank) : st_(std::move(state)), rank_(rank) {}

  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return st_->size; }

  status all_reduce_sum(const std::vector<at::Tensor>& tensors) override {
    st_->posted[static_cast<std::size_t>(rank_)] = &tensors;
    st_->barrier();
    std::string why = st_->mismatch("all_reduce_sum");
    std::vector<at::Tensor> sums;
    if (why.empty()) {
      try {  // the same additions in the same (rank) order on every rank: bit-identical sums
        for (std::size_t i = 0; i < tensors.size(); ++i) {
          at::Tensor s = (*st_->posted[0])[i].to(tensors[i].device(), /*non_blocking=*/false, /*copy=*/true);
          for (int r = 1; r < st_->size; ++r) s.add_((*st_->posted[static_cast<std::size_t>(r)])[i].to(tensors[i].device()));
          sums.push_back(std::move(s));
        }
      } catch (const std::exception& e) {
        why = std::string("all_reduce_sum: ") + e.what();
      }
    }
    st_->failed[static_cast<std::size_t>(rank_)] = why;
    st_->barrier();  // every rank has read every other's tensors (now they may change) and said how it went
    if (const std::string any = st_->any_failure(); !any.empty()) return error{"thread group: " + any};
    for (std::size_t i = 0; i < tensors.size(); ++i) tensors[i].copy_(sums[i]);
    return {};
  }

  status broadcast(const std::vector<at::Tensor>& tensors, int root) override {
    st_->posted[static_cast<std::size_t>(rank_)] = &tensors;
    st_->roots[static_cast<std::size_t>(rank_)] = root;
    st_->barrier();
    // A bad root is found after the barrier like any other disagreement: a rank that returned
    // before it would leave the others waiting.
    std::string why = root < 0 || root >= st_->size ? "broadcast: root " + std::to_string(root) +
                                                          " outside a group of " + std::to_string(st_->size)
                                                    : st_->mismatch("broadcast");
    for (int r = 0; r < st_->size && why.empty(); ++r)
      if (st_->roots[static_cast<std::size_t>(r)] != root)
        why = "broadcast: ranks disagree on the root (" + std::to_string(root) + " here, " +
              std::to_string(st_->roots[static_cast<std::size_t>(r)]) + " on rank " + std::to_string(r) + ")";
    if (why.empty() && rank_ != root) {
      try {
        const auto& from = *st_->posted[static_cast<std::size_t>(root)];
        for (std::size_t i = 0; i < tensors.size(); ++i) tensors[i].copy_(from[i]);
      } catch (const std::exception& e) {
        why = std::string("broadcast: ") + e.what();
      }
    }
    st_->failed[static_cast<std::size_t>(rank_)] = why;
    st_->barrier();  // the root's tensors have been read
    if (const std::string any = st_->any_failure(); !any.empty()) return error{"thread group: " + any};
    return {};
  }

  // Chunk rank() of every rank's input, added in rank order as all_reduce_sum adds.
  status reduce_scatter_sum(const at::Tensor& input, const at::Tensor& output) override {
    const std::vector<at::Tensor> mine{input};
    st_->posted[static_cast<std::size_t>(rank_)] = &mine;
    st_->barrier();
    std::string why = st_->mismatch("reduce_scatter_sum");
    if (why.empty()) why = chunk_mismatch("reduce_scatter_sum", input, output, st_->size);
    at::Tensor sum;
    if (why.empty()) {
      try {
        const std::int64_t n = output.numel(), at = n * rank_;
        sum = (*st_->posted[0])[0].reshape(-1).narrow(0, at, n).to(output.device(), /*non_blocking=*/false, /*copy=*/true);
        for (int r = 1; r < st_->size; ++r)
          sum.add_((*st_->posted[static_cast<std::size_t>(r)])[0].reshape(-1).narrow(0, at, n).to(output.device()));
      } catch (const std::exception& e) {
        why = std::string("reduce_scatter_sum: ") + e.what();
      }
    }
    st_->failed[static_cast<std::size_t>(rank_)] = why;
    st_->barrier();  // every rank has read every other's input
    if (const std::string any = st_->any_failure(); !any.empty()) return error{"thread group: " + any};
    output.view(-1).copy_(sum);
    return {};
  }

  status all_gather(const at::Tensor& input, const at::Tensor& output) override {
    const std::vector<at::Tensor> mine{input};
    st_->posted[static_cast<std::size_t>(rank_)] = &mine;
    st_->barrier();
    std::string why = st_->mismatch("all_gather");
    if (why.empty()) why = chunk_mismatch("all_gather", output, input, st_->size);
    if (why.empty()) {
      try {
        const std::int64_t n = input.numel();
        at::Tensor flat = output.view(-1);
        for (int r = 0; r < st_->size; ++r)
          flat.narrow(0, n * r, n).copy_((*st_->posted[static_cast<std::size_t>(r)])[0].reshape(-1));
      } catch (const std::exception& e) {
        why = std::string("all_gather: ") + e.what();
      }
    }
    st_->failed[static_cast<std::size_t>(rank_)] = why;
    st_->barrier();  // every rank has read every other's input
    if (const std::string any = st_->any_failure(); !any.empty()) return error{"thread group: " + any};
    return {};
  }

 private:
  std::shared_ptr<thread_group_state> st_;
  int rank_;
};

}  // namespace

status collective::reduce_scatter_sum(const at::Tensor& input, const at::Tensor& output) {
  // Every rank reaches the all-reduce even with wrong sizes here, so none waits for another.
  const std::string why = chunk_mismatch("reduce_scatter_sum", input, output, size());
  try {
    at::Tensor sum = input.reshape(-1).clone();
    if (auto s = all_reduce_sum({sum}); !s) return s;
    if (!why.empty()) return error{why};
    output.view(-1).copy_(sum.narrow(0, output.numel() * rank(), output.numel()));
  } catch (const std::exception& e) {
    return error{std::string("reduce_scatter_sum: ") + e.what()};
  }
  return {};
}

status collective::all_gather(const at::Tensor& input, const at::Tensor& output) {
  const std::string why = chunk_mismatch("all_gather", output, input, size());
  try {
    output.zero_();
    if (why.empty()) output.view(-1).narrow(0, input.numel() * rank(), input.numel()).copy_(input.reshape(-1));
    if (auto s = all_reduce_sum({output}); !s) return s;
    if (!why.empty()) return error{why};
  } catch (const std::exception& e) {
    return error{std::string("all_gather: ") + e.what()};
  }
  return {};
}

std::vector<std::shared_ptr<collective>> make_thread_group(int size) {
  if (size < 1) throw std::invalid_argument("make_thread_group: size must be >= 1");
  auto state = std::make_shared<thread_group_state>(size);
  std::vector<std::shared_ptr<collective>> ranks;
  for (int r = 0; r < size; ++r) ranks.push_back(std::make_shared<thread_rank>(state, r));
  return ranks;
}

status all_reduce_gradients(const std::vector<at::Tensor>& params, collective& group, std::size_t bucket_bytes) {
  if (group.size() == 1) return {};
  try {
    std::vector<at::Tensor> grads;
    grads.reserve(params.size());
    for (const auto& p : params) {
      if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
      grads.push_back(p.grad());
    }
    for (std::size_t i = 0; i < grads.size();) {
      // A bucket: consecutive gradients of one dtype and device, up to bucket_bytes (at least one).
      std::size_t j = i, bytes = 0;
      std::vector<at::Tensor> parts;
      while (j < grads.size()) {
        const at::Tensor& g = grads[j];
        const std::size_t n = static_cast<std::size_t>(g.numel()) * g.element_size();
        if (j > i && (g.scalar_type() != grads[i].scalar_type() || g.device() != grads[i].device() ||
                      bytes + n > bucket_bytes))
          break;
        parts.push_back(g.reshape(-1));
        bytes += n;
        ++j;
      }
      const at::Tensor flat = at::cat(parts);
      if (auto s = group.all_reduce_sum({flat}); !s) return s;
      std::int64_t offset = 0;
      for (std::size_t k = i; k < j; ++k) {
        const std::int64_t n = grads[k].numel();
        grads[k].copy_(flat.narrow(0, offset, n).view_as(grads[k]));
        offset += n;
      }
      i = j;
    }
  } catch (const c10::Error& e) {
    return error{std::string("gradient all-reduce: ") + e.what_without_backtrace()};
  }
  return {};
}

}  // namespace kforge::trainer

#include "trainer/gradient_reducer.hpp"

#include <stdexcept>
#include <string>

namespace kforge::trainer {

gradient_reducer::gradient_reducer(std::vector<at::Tensor> masters, std::vector<at::Tensor> backward,
                                   collective& group, std::size_t bucket_bytes)
    : masters_(std::move(masters)), backward_(std::move(backward)), group_(group) {
  if (backward_.size() != masters_.size())
    throw std::invalid_argument("gradient_reducer: " + std::to_string(backward_.size()) + " backward tensors for " +
                                std::to_string(masters_.size()) + " parameters");
  const std::size_t n = masters_.size();
  bucket_of_.assign(n, 0);
  offset_of_.assign(n, 0);
  written_.assign(n, false);
  // Reverse parameter order: the backward pass reaches the last layers first.
  for (std::size_t k = n; k-- > 0;) {
    const at::Tensor& p = masters_[k];
    const std::size_t bytes = static_cast<std::size_t>(p.numel()) * p.element_size();
    bool fits = !buckets_.empty();
    if (fits) {
      const bucket& b = buckets_.back();
      const at::Tensor& first = masters_[b.members.front()];
      std::size_t held = 0;
      for (std::size_t m : b.members) held += static_cast<std::size_t>(masters_[m].numel()) * masters_[m].element_size();
      fits = first.scalar_type() == p.scalar_type() && first.device() == p.device() && held + bytes <= bucket_bytes;
    }
    if (!fits) buckets_.emplace_back();
    bucket& b = buckets_.back();
    std::size_t offset = 0;
    for (std::size_t m : b.members) offset += static_cast<std::size_t>(masters_[m].numel());
    bucket_of_[k] = buckets_.size() - 1;
    offset_of_[k] = offset;
    b.members.push_back(k);
  }
  for (std::size_t k = 0; k < n; ++k)
    // LibTorch 2 calls hooks with a TensorBase, 1.13 with a Tensor: take the common base.
    hooks_.push_back(backward_[k].register_hook([this, k](const at::TensorBase& g) { on_gradient(k, at::Tensor(g)); }));
}

gradient_reducer::~gradient_reducer() {
  for (std::size_t k = 0; k < hooks_.size(); ++k) backward_[k].remove_hook(hooks_[k]);
}

void gradient_reducer::arm() {
  std::lock_guard lock(mutex_);
  armed_ = true;
  started_early_ = 0;
}

void gradient_reducer::write(std::size_t param, const at::Tensor& accumulated) {
  bucket& b = buckets_[bucket_of_[param]];
  if (!b.flat.defined()) {
    std::int64_t elements = 0;
    for (std::size_t m : b.members) elements += masters_[m].numel();
    b.flat = at::empty({elements}, masters_[param].options());
  }
  b.flat.narrow(0, static_cast<std::int64_t>(offset_of_[param]), masters_[param].numel())
      .copy_(accumulated.reshape(-1));
  written_[param] = true;
  ++b.filled;
}

void gradient_reducer::on_gradient(std::size_t param, const at::Tensor& grad) {
  std::lock_guard lock(mutex_);
  if (!armed_ || written_[param] || !first_error_.empty()) return;
  c10::NoGradGuard no_grad;  // c10's: LibTorch 2 has no at:: alias without torch headers
  try {
    // What the step's accumulation will hold once this gradient is added (the same fp32 add).
    const at::Tensor& master = masters_[param].grad();
    const at::Tensor g = grad.to(masters_[param].scalar_type());
    write(param, master.defined() ? master + g : g);
    const std::size_t before = next_to_start_;
    start_ready();
    started_early_ += next_to_start_ - before;
  } catch (const std::exception& e) {  // never out of an autograd hook: finish() reports it
    first_error_ = std::string("gradient reducer: ") + e.what();
  }
}

status gradient_reducer::start(bucket& b) { return group_.all_reduce_sum_start({b.flat}); }

void gradient_reducer::start_ready() {
  while (next_to_start_ < buckets_.size() && buckets_[next_to_start_].filled == buckets_[next_to_start_].members.size()) {
    if (auto s = start(buckets_[next_to_start_]); !s && first_error_.empty()) first_error_ = s.message();
    ++next_to_start_;
  }
}

status gradient_reducer::finish() {
  std::lock_guard lock(mutex_);
  c10::NoGradGuard no_grad;  // c10's: LibTorch 2 has no at:: alias without torch headers
  try {
    // Every bucket a hook did not complete, in order: gradients not written yet are final now.
    for (; next_to_start_ < buckets_.size(); ++next_to_start_) {
      bucket& b = buckets_[next_to_start_];
      for (std::size_t m : b.members)
        if (!written_[m]) write(m, masters_[m].grad().defined() ? masters_[m].grad() : at::zeros_like(masters_[m]));
      if (auto s = start(b); !s && first_error_.empty()) first_error_ = s.message();
    }
    if (auto s = group_.wait_started(); !s && first_error_.empty()) first_error_ = s.message();
    if (first_error_.empty())
      for (std::size_t k = 0; k < masters_.size(); ++k) {
        const bucket& b = buckets_[bucket_of_[k]];
        const at::Tensor sum =
            b.flat.narrow(0, static_cast<std::int64_t>(offset_of_[k]), masters_[k].numel()).view_as(masters_[k]);
        at::Tensor& g = masters_[k].mutable_grad();
        if (g.defined()) g.copy_(sum);
        else g = sum.clone();
      }
  } catch (const std::exception& e) {
    if (first_error_.empty()) first_error_ = std::string("gradient reducer: ") + e.what();
  }
  std::string failure;
  failure.swap(first_error_);
  armed_ = false;
  next_to_start_ = 0;
  written_.assign(written_.size(), false);
  for (auto& b : buckets_) {
    b.filled = 0;
    b.flat = at::Tensor();  // back to the allocator's cache until the next step
  }
  if (!failure.empty()) return error{failure};
  return {};
}

}  // namespace kforge::trainer

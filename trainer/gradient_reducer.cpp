#include "trainer/gradient_reducer.hpp"

#include <c10/util/Exception.h>

#include <stdexcept>
#include <string>

namespace kforge::trainer {

namespace {
std::string text(const std::exception& e) {
  if (const auto* c = dynamic_cast<const c10::Error*>(&e)) return c->what_without_backtrace();
  return e.what();
}
}  // namespace

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
  hooked_.assign(n, false);
  // Reverse parameter order: the backward pass reaches the last layers first.
  std::size_t held = 0;  // bytes in the last bucket
  for (std::size_t k = n; k-- > 0;) {
    const at::Tensor& p = masters_[k];
    const std::size_t bytes = static_cast<std::size_t>(p.numel()) * p.element_size();
    bool fits = !buckets_.empty();
    if (fits) {
      const at::Tensor& first = masters_[buckets_.back().members.front()];
      fits = first.scalar_type() == p.scalar_type() && first.device() == p.device() && held + bytes <= bucket_bytes;
    }
    if (!fits) {
      buckets_.emplace_back();
      held = 0;
    }
    bucket& b = buckets_.back();
    bucket_of_[k] = buckets_.size() - 1;
    offset_of_[k] = static_cast<std::size_t>(b.elements);
    b.members.push_back(k);
    b.elements += p.numel();
    held += bytes;
  }
  // The buckets live as long as the reducer (one fp32 copy of the gradients): a step never
  // allocates them, so a rank short of memory still makes every call the others make.
  for (auto& b : buckets_) b.flat = at::empty({b.elements}, masters_[b.members.front()].options());
  try {
    for (std::size_t k = 0; k < n; ++k) {
      if (!backward_[k].requires_grad()) continue;  // frozen: finish() sums its gradient or zeros
      // LibTorch 2 calls hooks with a TensorBase, 1.13 with a Tensor: take the common base.
      hooks_.emplace_back(k, backward_[k].register_hook(
                                 [this, k](const at::TensorBase& g) { on_gradient(k, at::Tensor(g)); }));
      hooked_[k] = true;
    }
  } catch (...) {  // no hook may outlive a reducer that was never made
    for (const auto& [k, h] : hooks_) backward_[k].remove_hook(h);
    throw;
  }
}

gradient_reducer::~gradient_reducer() {
  for (const auto& [k, h] : hooks_) backward_[k].remove_hook(h);
}

void gradient_reducer::arm() {
  std::lock_guard lock(mutex_);
  armed_ = true;
  // Parameters no hook watches (frozen) have their final gradient already: written now, so their
  // buckets, and every bucket after them, can still start during the backward pass.
  c10::NoGradGuard no_grad;
  try {
    for (std::size_t k = 0; k < masters_.size(); ++k) {
      if (hooked_[k] || written_[k]) continue;
      write_final(k);
      written_[k] = true;
      ++buckets_[bucket_of_[k]].filled;
    }
    start_complete();
  } catch (const std::exception& e) {
    if (first_error_.empty()) first_error_ = "gradient reducer: " + text(e);
  }
}

void gradient_reducer::start_complete() {
  // In order, so every rank makes the same calls.
  while (next_to_start_ < buckets_.size() &&
         buckets_[next_to_start_].filled == buckets_[next_to_start_].members.size()) {
    if (auto st = group_.all_reduce_sum_start({buckets_[next_to_start_].flat}); !st && first_error_.empty())
      first_error_ = st.message();
    ++next_to_start_;
    ++started_early_;
  }
}

at::Tensor gradient_reducer::slot(std::size_t param) {
  return buckets_[bucket_of_[param]].flat.narrow(0, static_cast<std::int64_t>(offset_of_[param]),
                                                 masters_[param].numel());
}

void gradient_reducer::write_final(std::size_t param) {
  at::Tensor s = slot(param);
  if (masters_[param].grad().defined()) s.copy_(masters_[param].grad().reshape(-1));
  else s.zero_();
}

void gradient_reducer::on_gradient(std::size_t param, const at::Tensor& grad) {
  std::lock_guard lock(mutex_);
  if (!armed_ || !first_error_.empty() || !grad.defined()) return;  // AccumulateGrad skips undefined too
  if (written_[param]) {
    first_error_ = "gradient reducer: parameter " + std::to_string(param) +
                   " got a second gradient in one backward pass (its bucket may be summing already)";
    return;
  }
  c10::NoGradGuard no_grad;
  try {
    // What the step's accumulation will hold once this gradient is added: the same fp32 add (in
    // the other order, which IEEE addition does not mind), written straight into the bucket.
    at::Tensor s = slot(param);
    s.copy_(grad.reshape(-1));
    if (masters_[param].grad().defined()) s.add_(masters_[param].grad().reshape(-1));
    written_[param] = true;
    ++buckets_[bucket_of_[param]].filled;
    start_complete();
  } catch (const std::exception& e) {  // never out of an autograd hook: finish() reports it
    first_error_ = "gradient reducer: " + text(e);
  }
}

status gradient_reducer::finish() {
  std::lock_guard lock(mutex_);
  c10::NoGradGuard no_grad;
  // Every bucket a hook did not start, in order, whatever fails: the other ranks make these calls
  // (a bucket's numbers do not matter once this rank has failed: the step fails everywhere).
  for (; next_to_start_ < buckets_.size(); ++next_to_start_) {
    bucket& b = buckets_[next_to_start_];
    try {
      for (std::size_t m : b.members)
        if (!written_[m]) write_final(m);
    } catch (const std::exception& e) {
      if (first_error_.empty()) first_error_ = "gradient reducer: " + text(e);
    }
    if (auto st = group_.all_reduce_sum_start({b.flat}); !st && first_error_.empty()) first_error_ = st.message();
  }
  if (auto st = group_.wait_started(); !st && first_error_.empty()) first_error_ = st.message();
  if (first_error_.empty()) {
    try {
      for (std::size_t k = 0; k < masters_.size(); ++k) {
        const at::Tensor sum = slot(k).view_as(masters_[k]);
        at::Tensor& g = masters_[k].mutable_grad();
        if (g.defined()) g.copy_(sum);
        else g = sum.clone();
      }
    } catch (const std::exception& e) {
      first_error_ = "gradient reducer: " + text(e);
    }
  }
  std::string failure;
  failure.swap(first_error_);
  armed_ = false;
  next_to_start_ = 0;
  last_started_early_ = started_early_;
  started_early_ = 0;
  written_.assign(written_.size(), false);
  for (auto& b : buckets_) b.filled = 0;
  if (!failure.empty()) return error{failure};
  return {};
}

}  // namespace kforge::trainer

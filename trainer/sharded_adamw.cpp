#include "trainer/sharded_adamw.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

// The archive headers only, as grpo_step.cpp: <torch/torch.h> would double the compile time.
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <cmath>
#include <limits>
#include <stdexcept>

namespace kforge::trainer {

std::vector<shard_bucket> shard_buckets(const std::vector<at::Tensor>& params, int ranks, std::size_t bucket_bytes) {
  std::vector<shard_bucket> out;
  for (std::size_t i = 0; i < params.size();) {
    shard_bucket b;
    b.first = i;
    std::size_t bytes = 0;
    while (i < params.size()) {
      const std::size_t n = static_cast<std::size_t>(params[i].numel()) * sizeof(float);
      if (i > b.first && (params[i].scalar_type() != params[b.first].scalar_type() || bytes + n > bucket_bytes)) break;
      bytes += n;
      b.numel += params[i].numel();
      ++i;
    }
    b.last = i;
    b.chunk = (b.numel + ranks - 1) / ranks;
    out.push_back(b);
  }
  return out;
}

struct sharded_adamw::impl {
  std::vector<at::Tensor> params;
  std::shared_ptr<collective> group;
  sharded_adamw_options opt;
  int rank = 0, ranks = 1;
  std::vector<shard_bucket> buckets;
  // Per bucket, this rank's chunk (fp32): master weights, moments, and the summed gradient of the
  // step under way.
  std::vector<at::Tensor> master, exp_avg, exp_avg_sq, grad;
  std::int64_t steps = 0;

  // The bucket's parameters (or `from`, tensors of the same shapes) flattened to fp32 and padded.
  at::Tensor flat(const shard_bucket& b, const std::vector<at::Tensor>& from, bool grads) const {
    at::Tensor out = at::zeros({b.chunk * ranks}, params[b.first].options().dtype(at::kFloat));
    std::int64_t at = 0;
    for (std::size_t i = b.first; i < b.last; ++i) {
      const at::Tensor& t = grads ? from[i].grad() : from[i];
      const std::int64_t n = from[i].numel();
      if (t.defined()) out.narrow(0, at, n).copy_(t.detach().reshape(-1));  // no gradient: zeros
      at += n;
    }
    return out;
  }

  status reduce_scatter(const at::Tensor& in, const at::Tensor& out) {
    if (ranks == 1) {
      out.copy_(in);
      return {};
    }
    return group->reduce_scatter_sum(in, out);
  }

  status gather(const shard_bucket& b, const at::Tensor& chunk) {
    at::NoGradGuard no_grad;
    const auto dtype = params[b.first].scalar_type();
    const at::Tensor mine = chunk.to(dtype);
    at::Tensor whole = ranks == 1 ? mine : at::empty({b.chunk * ranks}, mine.options());
    if (ranks > 1)
      if (auto s = group->all_gather(mine, whole); !s) return s;
    std::int64_t at = 0;
    for (std::size_t i = b.first; i < b.last; ++i) {
      const std::int64_t n = params[i].numel();
      params[i].detach().copy_(whole.narrow(0, at, n).view_as(params[i]));
      at += n;
    }
    return {};
  }

  void drop_grads(const shard_bucket& b) {
    for (std::size_t i = b.first; i < b.last; ++i) params[i].mutable_grad() = at::Tensor();
  }
};

sharded_adamw::sharded_adamw(std::vector<at::Tensor> params, std::shared_ptr<collective> group,
                             sharded_adamw_options o, const std::vector<at::Tensor>& masters) {
  if (!(o.lr > 0)) throw std::invalid_argument("sharded_adamw: lr must be > 0");
  if (o.bucket_bytes == 0) throw std::invalid_argument("sharded_adamw: bucket_bytes must be > 0");
  if (params.empty()) throw std::invalid_argument("sharded_adamw: no parameters");
  if (!masters.empty() && masters.size() != params.size())
    throw std::invalid_argument("sharded_adamw: " + std::to_string(masters.size()) + " master tensors for " +
                                std::to_string(params.size()) + " parameters");
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (!at::isFloatingType(params[i].scalar_type()) || params[i].device() != params.front().device())
      throw std::invalid_argument("sharded_adamw: parameters must be floating point, on one device");
    if (!masters.empty() && !masters[i].sizes().equals(params[i].sizes()))
      throw std::invalid_argument("sharded_adamw: master " + std::to_string(i) + " differs in shape from its parameter");
  }
  impl_ = std::make_unique<impl>();
  auto& st = *impl_;
  st.params = std::move(params);
  st.group = std::move(group);
  st.opt = o;
  st.rank = st.group ? st.group->rank() : 0;
  st.ranks = st.group ? st.group->size() : 1;
  st.buckets = shard_buckets(st.params, st.ranks, o.bucket_bytes);
  for (const auto& b : st.buckets) {
    // Only this rank's chunk is kept; the whole bucket lives for this loop iteration.
    at::Tensor whole = st.flat(b, masters.empty() ? st.params : masters, /*grads=*/false);
    st.master.push_back(whole.narrow(0, b.chunk * st.rank, b.chunk).clone());
    st.exp_avg.push_back(at::zeros_like(st.master.back()));
    st.exp_avg_sq.push_back(at::zeros_like(st.master.back()));
  }
}
sharded_adamw::~sharded_adamw() = default;
sharded_adamw::sharded_adamw(sharded_adamw&&) noexcept = default;
sharded_adamw& sharded_adamw::operator=(sharded_adamw&&) noexcept = default;

result<sharded_step_stats> sharded_adamw::step() {
  auto& st = *impl_;
  sharded_step_stats out;
  at::NoGradGuard no_grad;
  if (st.grad.empty())
    if (auto s = accumulate(); !s) return s.err();
  try {
    // 2. The global norm; padding is zeros and adds nothing.
    at::Tensor sq = at::zeros({1}, st.grad.front().options().dtype(at::kDouble));
    for (const auto& g : st.grad) sq.add_(g.to(at::kDouble).pow(2).sum());
    if (st.ranks > 1)
      if (auto s = st.group->all_reduce_sum({sq}); !s) {
        st.grad.clear();
        return error{"sharded optimiser: gradient norm: " + s.message()};
      }
    out.grad_norm = std::sqrt(sq.item<double>());
    const double max_norm = st.opt.max_grad_norm > 0 ? st.opt.max_grad_norm : std::numeric_limits<double>::infinity();
    out.grad_clipped = out.grad_norm > max_norm;
    if (!std::isfinite(out.grad_norm)) {  // every rank sees the same norm: none steps
      st.grad.clear();
      return out;
    }
    if (out.grad_clipped) {
      const double scale = max_norm / (out.grad_norm + 1e-6);  // as grpo_step's clip_grad_norm
      for (auto& g : st.grad) g.mul_(scale);
    }
    // 3. AdamW on this rank's chunks, in torch::optim::AdamW's operations and order, so that one
    // rank is bit-identical to it.
    ++st.steps;
    const auto& o = st.opt;
    const double bias1 = 1 - std::pow(o.beta1, static_cast<double>(st.steps));
    const double bias2 = 1 - std::pow(o.beta2, static_cast<double>(st.steps));
    for (std::size_t k = 0; k < st.buckets.size(); ++k) {
      at::Tensor& p = st.master[k];
      const at::Tensor& g = st.grad[k];
      if (o.weight_decay != 0) p.mul_(1 - o.lr * o.weight_decay);
      st.exp_avg[k].mul_(o.beta1).add_(g, 1 - o.beta1);
      st.exp_avg_sq[k].mul_(o.beta2).addcmul_(g, g, 1 - o.beta2);
      const at::Tensor denom = (st.exp_avg_sq[k].sqrt() / std::sqrt(bias2)).add_(o.eps);
      p.addcdiv_(st.exp_avg[k], denom, -(o.lr / bias1));
    }
    st.grad.clear();
  } catch (const c10::Error& e) {
    st.grad.clear();
    return error{std::string("sharded optimiser: ") + e.what_without_backtrace()};
  }
  // 4. Every rank's new chunks into every rank's parameters.
  if (auto s = gather_weights(); !s) return s.err();
  out.stepped = true;
  return out;
}

status sharded_adamw::accumulate() {
  auto& st = *impl_;
  at::NoGradGuard no_grad;
  const bool first = st.grad.empty();
  const auto fail = [&](const std::string& why) -> status {
    for (const auto& b : st.buckets) st.drop_grads(b);
    st.grad.clear();
    return error{"sharded optimiser: " + why};
  };
  try {
    // One bucket at a time: a whole fp32 bucket exists only while it is summed.
    for (std::size_t k = 0; k < st.buckets.size(); ++k) {
      const auto& b = st.buckets[k];
      const at::Tensor whole = st.flat(b, st.params, /*grads=*/true);
      st.drop_grads(b);
      at::Tensor sum = at::empty({b.chunk}, whole.options());
      if (auto s = st.reduce_scatter(whole, sum); !s) return fail(s.message());
      if (first) st.grad.push_back(sum);
      else st.grad[k].add_(sum);
    }
  } catch (const c10::Error& e) {
    return fail(e.what_without_backtrace());
  }
  return {};
}

void sharded_adamw::clear_gradients() noexcept { impl_->grad.clear(); }

bool sharded_adamw::sums_each_micro_batch() const noexcept {
  return impl_->params.front().scalar_type() != at::kFloat && impl_->params.front().scalar_type() != at::kDouble;
}

status sharded_adamw::gather_weights() {
  auto& st = *impl_;
  try {
    for (std::size_t k = 0; k < st.buckets.size(); ++k)
      if (auto s = st.gather(st.buckets[k], st.master[k]); !s) return error{"sharded optimiser: " + s.message()};
  } catch (const c10::Error& e) {
    return error{std::string("sharded optimiser: all-gather: ") + e.what_without_backtrace()};
  }
  return {};
}

namespace {

// What a shard file must match: rank, ranks, then each bucket's element count and chunk.
at::Tensor layout_of(int rank, int ranks, const std::vector<shard_bucket>& buckets) {
  std::vector<std::int64_t> v{rank, ranks};
  for (const auto& b : buckets) {
    v.push_back(b.numel);
    v.push_back(b.chunk);
  }
  return at::tensor(v, at::kLong);
}

std::string describe(const at::Tensor& layout) {
  if (layout.dim() != 1 || layout.numel() < 2) return "an unknown layout";
  const auto v = layout.to(at::kLong).contiguous();
  const auto* p = v.data_ptr<std::int64_t>();
  return "rank " + std::to_string(p[0]) + " of " + std::to_string(p[1]) + ", " + std::to_string((v.numel() - 2) / 2) +
         " buckets";
}

}  // namespace

status sharded_adamw::save_state(const std::string& path) const {
  const auto& st = *impl_;
  try {
    torch::serialize::OutputArchive archive;
    archive.write("layout", layout_of(st.rank, st.ranks, st.buckets));
    archive.write("steps", at::tensor({st.steps}, at::kLong));
    for (std::size_t k = 0; k < st.buckets.size(); ++k) {
      const std::string n = std::to_string(k);
      archive.write("master." + n, st.master[k].cpu());
      archive.write("exp_avg." + n, st.exp_avg[k].cpu());
      archive.write("exp_avg_sq." + n, st.exp_avg_sq[k].cpu());
    }
    archive.save_to(path);
  } catch (const std::exception& e) {
    return error{path + ": cannot write the sharded optimiser state: " + e.what()};
  }
  return {};
}

status sharded_adamw::load_state(const std::string& path) {
  auto& st = *impl_;
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(path);
    at::Tensor layout, steps;
    archive.read("layout", layout);
    const at::Tensor want = layout_of(st.rank, st.ranks, st.buckets);
    if (!layout.sizes().equals(want.sizes()) || !layout.equal(want))
      return error{path + ": written by " + describe(layout) + ", this is " + describe(want) +
                   ": resume a sharded optimiser with the same number of ranks and grad bucket size"};
    archive.read("steps", steps);
    // Read everything before changing anything: a file that fails half-way leaves this unchanged.
    std::vector<at::Tensor> master, m, v;
    for (std::size_t k = 0; k < st.buckets.size(); ++k) {
      const std::string n = std::to_string(k);
      at::Tensor a, b, c;
      archive.read("master." + n, a);
      archive.read("exp_avg." + n, b);
      archive.read("exp_avg_sq." + n, c);
      for (const at::Tensor* t : {&a, &b, &c})
        if (t->scalar_type() != at::kFloat || t->numel() != st.buckets[k].chunk)
          return error{path + ": bucket " + n + " holds a tensor of the wrong size or dtype"};
      const auto dev = st.master[k].device();
      master.push_back(a.to(dev));
      m.push_back(b.to(dev));
      v.push_back(c.to(dev));
    }
    st.master = std::move(master);
    st.exp_avg = std::move(m);
    st.exp_avg_sq = std::move(v);
    st.steps = steps.item<std::int64_t>();
  } catch (const std::exception& e) {
    return error{path + ": cannot load the sharded optimiser state: " + e.what()};
  }
  return {};
}

std::int64_t sharded_adamw::steps() const noexcept { return impl_->steps; }
std::int64_t sharded_adamw::shard_numel() const noexcept {
  std::int64_t n = 0;
  for (const auto& b : impl_->buckets) n += b.chunk;
  return n;
}
std::int64_t sharded_adamw::total_numel() const noexcept {
  std::int64_t n = 0;
  for (const auto& b : impl_->buckets) n += b.numel;
  return n;
}
const std::vector<shard_bucket>& sharded_adamw::buckets() const noexcept { return impl_->buckets; }

}  // namespace kforge::trainer

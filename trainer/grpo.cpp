#include "trainer/grpo.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

namespace kforge::trainer {

namespace {

/// Bound on |ref - logp| inside k3: exp(20) is far past any KL worth estimating, and it keeps one
/// wild token (a log-prob of -1e4 from a masked vocabulary entry) from overflowing the whole sum.
constexpr double k3_log_ratio_bound = 20.0;

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("grpo_loss: " + what);
}

void require_like(const at::Tensor& t, const at::Tensor& logp, const char* name) {
  if (!t.defined()) return;
  require(t.sizes() == logp.sizes(), std::string(name) + " must have the shape of logp");
}

double item(const at::Tensor& t) { return t.item<double>(); }

}  // namespace

group_advantages compute_advantages(const std::vector<double>& rewards,
                                    const std::vector<std::int64_t>& group_sizes,
                                    const grpo_options& opt,
                                    const std::vector<std::vector<double>>& baselines) {
  if (!baselines.empty() && baselines.size() != group_sizes.size())
    throw std::invalid_argument("compute_advantages: " + std::to_string(baselines.size()) +
                                " baselines for " + std::to_string(group_sizes.size()) + " groups");
  std::int64_t total = 0;
  for (auto n : group_sizes) {
    if (n < 1) throw std::invalid_argument("compute_advantages: a group size is < 1");
    total += n;
  }
  if (total != static_cast<std::int64_t>(rewards.size()))
    throw std::invalid_argument("compute_advantages: group sizes sum to " + std::to_string(total) +
                                ", but there are " + std::to_string(rewards.size()) + " rewards");

  group_advantages out;
  out.advantages.assign(rewards.size(), 0.0);
  out.keep.assign(rewards.size(), true);
  out.groups = static_cast<std::int64_t>(group_sizes.size());
  // One reward, or all within equal_reward_tol of each other: no signal among them.
  const auto all_equal = [&](std::vector<double>::const_iterator first,
                             std::vector<double>::const_iterator last) {
    const auto [lo, hi] = std::minmax_element(first, last);
    return last - first == 1 || *hi - *lo <= opt.equal_reward_tol;
  };
  std::size_t begin = 0;
  for (std::size_t g = 0; g < group_sizes.size(); ++g) {
    const auto n = static_cast<std::size_t>(group_sizes[g]);
    const auto kept = rewards.begin() + static_cast<std::ptrdiff_t>(begin);
    const bool own = baselines.empty() || baselines[g].empty();
    const auto first = own ? kept : baselines[g].begin();
    const auto last = own ? kept + static_cast<std::ptrdiff_t>(n) : baselines[g].end();
    const auto m = static_cast<std::size_t>(last - first);  // rewards the statistics are over
    if (all_equal(first, last)) {
      ++out.equal_groups;
      if (opt.skip_equal_groups) {
        ++out.skipped_groups;
        std::fill_n(out.keep.begin() + static_cast<std::ptrdiff_t>(begin), n, false);
      }
    } else {
      // A signal the group's own rewards would not have given.
      out.draw_signal_groups += !own && all_equal(kept, kept + static_cast<std::ptrdiff_t>(n));
      const double mean = std::accumulate(first, last, 0.0) / static_cast<double>(m);
      double ss = 0;
      for (auto it = first; it != last; ++it) ss += (*it - mean) * (*it - mean);
      const double sd = std::sqrt(ss / static_cast<double>(opt.unbiased_std ? m - 1 : m));
      const double scale = opt.scale_by_std ? 1.0 / (sd + opt.adv_eps) : 1.0;
      for (std::size_t i = 0; i < n; ++i)
        out.advantages[begin + i] = (rewards[begin + i] - mean) * scale;
    }
    begin += n;
  }

  if (!rewards.empty())
    out.reward_mean =
        std::accumulate(rewards.begin(), rewards.end(), 0.0) / static_cast<double>(rewards.size());
  double sum = 0, sq = 0;
  bool first = true;
  for (std::size_t i = 0; i < rewards.size(); ++i) {
    if (!out.keep[i]) continue;
    const double a = out.advantages[i];
    ++out.kept_samples;
    sum += a;
    sq += a * a;
    out.adv_min = first ? a : std::min(out.adv_min, a);
    out.adv_max = first ? a : std::max(out.adv_max, a);
    first = false;
  }
  if (out.kept_samples > 0) {
    const auto k = static_cast<double>(out.kept_samples);
    out.adv_mean = sum / k;
    out.adv_std = std::sqrt(std::max(0.0, sq / k - out.adv_mean * out.adv_mean));
  }
  return out;
}

at::Tensor k3_kl(const at::Tensor& logp, const at::Tensor& ref_logp) {
  const auto d = (ref_logp - logp).clamp(-k3_log_ratio_bound, k3_log_ratio_bound);
  return at::exp(d) - d - 1;
}

grpo_loss_result grpo_loss(const grpo_loss_inputs& in, const grpo_options& opt, double kl_coef,
                           double token_normaliser) {
  require(in.logp.defined() && in.logp.dim() == 2, "logp must be a [B, T] tensor");
  require(in.logp.is_floating_point(), "logp must be floating point");
  require(in.mask.defined() && in.mask.sizes() == in.logp.sizes(),
          "mask must have the shape of logp");
  require(in.advantages.defined() && in.advantages.dim() == 1 &&
              in.advantages.size(0) == in.logp.size(0),
          "advantages must be [B] with B = logp.size(0)");
  require_like(in.old_logp, in.logp, "old_logp");
  require_like(in.behaviour_logp, in.logp, "behaviour_logp");
  require_like(in.ref_logp, in.logp, "ref_logp");

  // Half-precision log-probs (a bf16 model) are upcast: the loss and its statistics need fp32.
  const auto dtype = at::promote_types(in.logp.scalar_type(), at::kFloat);
  const auto m = in.mask.to(at::kBool);
  const auto mf = m.to(dtype);
  const auto zero = at::zeros({}, in.logp.options().dtype(dtype));
  // Padding may hold anything (-inf, NaN from a masked softmax): zero it before any arithmetic, so
  // neither the sum nor the backward pass (0 * inf) sees it.
  auto clean = [&](const at::Tensor& t) { return at::where(m, t.to(dtype), zero); };

  const auto logp = clean(in.logp);
  const auto old = in.old_logp.defined() ? clean(in.old_logp.detach()) : logp.detach();
  const auto adv = in.advantages.detach().to(dtype).unsqueeze(1);

  const auto ratio = at::exp(logp - old);
  const auto clipped = ratio.clamp(1.0 - opt.clip_eps_low, 1.0 + opt.clip_eps_high);
  const auto surr = at::minimum(ratio * adv, clipped * adv);

  at::Tensor w;
  if (in.behaviour_logp.defined())
    w = at::exp(old - clean(in.behaviour_logp.detach())).clamp_max(opt.is_cap);
  else
    w = at::ones_like(logp);
  const auto pg = -w * surr;

  at::Tensor kl;
  at::Tensor per_token = pg;
  if (in.ref_logp.defined()) {
    kl = k3_kl(logp, clean(in.ref_logp.detach()));
    per_token = pg + kl_coef * kl;
  }

  const double tokens = item(mf.sum());
  const double n = token_normaliser > 0 ? token_normaliser : tokens;
  grpo_loss_result out;
  out.stats.tokens = static_cast<std::int64_t>(tokens);
  if (n <= 0) {  // nothing to train on: a zero loss that still has a graph
    out.loss = (logp * 0).sum();
    return out;
  }
  out.loss = (per_token * mf).sum() / n;

  auto& s = out.stats;
  s.loss = item(out.loss.detach());
  s.policy_loss = item((pg.detach() * mf).sum()) / n;
  if (kl.defined()) s.kl_loss = kl_coef * item((kl.detach() * mf).sum()) / n;
  if (tokens > 0) {
    auto mean = [&](const at::Tensor& t) { return item((t.detach() * mf).sum()) / tokens; };
    auto frac = [&](const at::Tensor& b) { return item((b & m).sum()) / tokens; };
    const auto r = ratio.detach();
    if (kl.defined()) s.mean_kl = mean(kl);
    s.mean_ratio = mean(r);
    s.clip_low_fraction = frac((adv < 0) & (r < 1.0 - opt.clip_eps_low));
    s.clip_high_fraction = frac((adv > 0) & (r > 1.0 + opt.clip_eps_high));
    s.clip_fraction = s.clip_low_fraction + s.clip_high_fraction;
    s.mean_is_weight = mean(w);
    if (in.behaviour_logp.defined()) s.is_truncated_fraction = frac(w.detach() >= opt.is_cap);
  }
  return out;
}

}  // namespace kforge::trainer

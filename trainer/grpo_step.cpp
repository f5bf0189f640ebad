#include "trainer/grpo_step.hpp"

#include "trainer/gradient_reducer.hpp"

// The optimiser's header only: <torch/torch.h> (all of nn, data, jit, ...) costs this TU about
// twice the compile time.
#include <torch/types.h>
#include <torch/optim/adamw.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>
#include <torch/utils.h>
#include <torch/autograd.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>

namespace kforge::trainer {

std::vector<grpo_sample> split_by_turn(const grpo_sample& episode, const std::vector<double>& returns) {
  const auto& mask = episode.completion_mask;
  std::vector<std::pair<std::size_t, std::size_t>> turns;  // [begin, end) of each run of 1s
  for (std::size_t i = 0; i < mask.size(); ++i) {
    if (mask[i] == 0) continue;
    if (turns.empty() || turns.back().second != i) turns.emplace_back(i, i);
    turns.back().second = i + 1;
  }
  // One turn fewer than returns only where the episode ends on an observation: its last turn wrote
  // nothing (ended_turn_candidate). Anything else would credit turns with another turn's return.
  const bool last_empty = turns.size() + 1 == returns.size() && !mask.empty() && mask.back() == 0;
  if (mask.size() != episode.completion.size() || turns.empty() || (turns.size() != returns.size() && !last_empty))
    return {};
  const bool has_logp = !episode.behaviour_logp.empty();
  if (has_logp && episode.behaviour_logp.size() != episode.completion.size()) return {};
  std::vector<grpo_sample> out;
  for (std::size_t k = 0; k < turns.size(); ++k) {
    const auto [begin, end] = turns[k];
    grpo_sample s;
    s.prompt = episode.prompt;
    s.completion.assign(episode.completion.begin(), episode.completion.begin() + static_cast<std::ptrdiff_t>(end));
    s.completion_mask.assign(end, 0);
    std::fill(s.completion_mask.begin() + static_cast<std::ptrdiff_t>(begin), s.completion_mask.end(), 1);
    if (has_logp)
      s.behaviour_logp.assign(episode.behaviour_logp.begin(),
                              episode.behaviour_logp.begin() + static_cast<std::ptrdiff_t>(end));
    s.reward = returns[k];
    s.policy_version = episode.policy_version;
    out.push_back(std::move(s));
  }
  return out;
}

packed_sequences pack_sequences(const std::vector<const grpo_sample*>& samples,
                                std::int64_t pad_id) {
  const auto b = static_cast<std::int64_t>(samples.size());
  std::int64_t len = 0;
  packed_sequences out;
  for (const auto* s : samples) {
    if (s->prompt.empty()) throw std::invalid_argument("pack_sequences: a sample has an empty prompt");
    len = std::max(len, static_cast<std::int64_t>(s->prompt.size() + s->completion.size()));
    out.max_completion = std::max(out.max_completion, static_cast<std::int64_t>(s->completion.size()));
  }
  out.tokens = torch::full({b, len}, pad_id, torch::kLong);
  out.prompt_lengths = torch::empty({b}, torch::kLong);
  out.completion_lengths = torch::empty({b}, torch::kLong);
  auto tok = out.tokens.accessor<std::int64_t, 2>();
  auto pl = out.prompt_lengths.accessor<std::int64_t, 1>();
  auto cl = out.completion_lengths.accessor<std::int64_t, 1>();
  for (std::int64_t i = 0; i < b; ++i) {
    const auto& s = *samples[static_cast<std::size_t>(i)];
    std::int64_t p = 0;
    for (auto t : s.prompt) tok[i][p++] = t;
    for (auto t : s.completion) tok[i][p++] = t;
    pl[i] = static_cast<std::int64_t>(s.prompt.size());
    cl[i] = static_cast<std::int64_t>(s.completion.size());
  }
  return out;
}

namespace {

// token_logprobs' autograd function: the logits are all it keeps for backward, beside each row's
// log-sum-exp.
struct token_logprob_function : torch::autograd::Function<token_logprob_function> {
  // Rows [at, at + len) of `logits` in fp32, divided by the temperature.
  static at::Tensor scaled(const at::Tensor& logits, std::int64_t at, std::int64_t len, double scale) {
    const at::Tensor x = logits.narrow(0, at, len).to(at::kFloat);
    return scale == 1.0 ? x : x * scale;  // never in place: x may be the logits themselves
  }

  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& logits, const at::Tensor& targets,
                            double scale, std::int64_t chunk) {
    const auto n = logits.size(0);
    auto out = at::empty({n}, logits.options().dtype(at::kFloat));
    auto lse = at::empty({n}, out.options());
    for (std::int64_t at = 0; at < n; at += chunk) {
      const auto len = std::min(chunk, n - at);
      const at::Tensor x = scaled(logits, at, len, scale);
      const at::Tensor l = at::logsumexp(x, -1);
      lse.narrow(0, at, len).copy_(l);
      out.narrow(0, at, len).copy_(x.gather(1, targets.narrow(0, at, len).unsqueeze(1)).squeeze(1) - l);
    }
    ctx->save_for_backward({logits, targets, lse});
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["chunk"] = chunk;
    return out;
  }

  // d out_i / d logits_ij = scale (1[j = target_i] - softmax_ij), a chunk of rows at a time.
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &logits = saved[0], &targets = saved[1], &lse = saved[2];
    const double scale = ctx->saved_data["scale"].toDouble();
    const std::int64_t chunk = ctx->saved_data["chunk"].toInt();
    const at::Tensor g = grad_out[0].to(at::kFloat);
    at::Tensor grad = at::empty_like(logits);
    const auto n = logits.size(0);
    for (std::int64_t at = 0; at < n; at += chunk) {
      const auto len = std::min(chunk, n - at);
      const at::Tensor gi = g.narrow(0, at, len).unsqueeze(1);
      at::Tensor d = (scaled(logits, at, len, scale) - lse.narrow(0, at, len).unsqueeze(1)).exp_().mul_(-gi);
      d.scatter_add_(1, targets.narrow(0, at, len).unsqueeze(1), gi);
      if (scale != 1.0) d.mul_(scale);
      grad.narrow(0, at, len).copy_(d);
    }
    return {grad, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor token_logprobs(const at::Tensor& logits, const at::Tensor& targets, double temperature,
                          std::int64_t chunk_rows) {
  if (logits.dim() != 2 || targets.dim() != 1 || targets.size(0) != logits.size(0))
    throw std::invalid_argument("token_logprobs: logits must be [N, V] and targets [N]");
  if (chunk_rows < 1) throw std::invalid_argument("token_logprobs: chunk_rows must be >= 1");
  const double scale = temperature > 0 ? 1.0 / temperature : 1.0;
  return token_logprob_function::apply(logits, targets.to(logits.device(), at::kLong), scale, chunk_rows);
}

at::Tensor gather_completion_logp(const at::Tensor& logits, const packed_sequences& packed, double temperature) {
  const auto b = packed.tokens.size(0);
  const auto len = packed.tokens.size(1);
  if (logits.dim() != 3 || logits.size(0) != b || logits.size(1) != len)
    throw std::invalid_argument("gather_completion_logp: logits must be [B, L, V] of packed.tokens");
  const auto t = packed.max_completion;
  if (t == 0 || len < 2) return torch::zeros({b, t}, logits.options().dtype(torch::kFloat));
  const auto dev = logits.device();
  // Log-prob of every next token: position p of logp_next is log p(tokens[p + 1] | tokens[..p]).
  // Every position of the flattened logits gets a target (the last one of a row a dummy, dropped
  // after): a narrowed [B, L - 1, V] would have to be copied to be flattened.
  const auto next = torch::cat({packed.tokens.narrow(1, 1, len - 1), torch::zeros({b, 1}, torch::kLong)}, 1);
  const auto logp_next = token_logprobs(logits.reshape({b * len, logits.size(2)}), next.reshape({-1}).to(dev),
                                        temperature)
                             .view({b, len})
                             .narrow(1, 0, len - 1);
  // Completion token j of row b sits at prompt_len + j, predicted at position prompt_len - 1 + j.
  auto index = packed.prompt_lengths.to(dev).unsqueeze(1) - 1 +
               torch::arange(t, torch::TensorOptions().dtype(torch::kLong).device(dev)).unsqueeze(0);
  index = index.clamp_max(len - 2);  // past a row's end: any valid column, masked by the caller
  return logp_next.gather(1, index);
}

struct grpo_stepper::impl {
  impl(std::vector<at::Tensor> p, grpo_step_options o, std::unique_ptr<sharded_adamw> s)
      : params(std::move(p)), opt(o), sharded(std::move(s)) {
    if (!sharded)
      adamw.emplace(params, torch::optim::AdamWOptions(o.lr)
                                .betas(std::make_tuple(o.beta1, o.beta2))
                                .eps(o.adam_eps)
                                .weight_decay(o.weight_decay));
  }
  std::vector<at::Tensor> params;
  std::vector<at::Tensor> compute;  // empty, or the lower-precision copies computed on
  grpo_step_options opt;
  // Exactly one of the two: the sharded optimiser, or (unsharded) LibTorch's AdamW.
  std::unique_ptr<sharded_adamw> sharded;
  std::optional<torch::optim::AdamW> adamw;
  std::int64_t steps = 0;
  // Data parallel with overlap: the reducer for `reducer_group`, made at the first parallel step.
  std::unique_ptr<gradient_reducer> reducer;
  collective* reducer_group = nullptr;

  // The reducer for this step, or none (sum after backward). Every rank builds its reducer on the
  // same step (the first parallel one, or after its group or compute copies changed), so they
  // agree then that every rank could (its buckets are an allocation): if one could not, none uses
  // one and the step fails everywhere (`failed`), the group intact for the next.
  gradient_reducer* reducer_for(collective& group, std::string& failed) {
    if (!opt.overlap_grad_reduce || !group.sums_in_background()) return nullptr;
    if (reducer && reducer_group == &group) return reducer.get();
    std::string why;
    reducer.reset();
    try {
      reducer = std::make_unique<gradient_reducer>(params, compute.empty() ? params : compute, group,
                                                   opt.grad_bucket_bytes);
      reducer_group = &group;
    } catch (const std::exception& e) {
      why = std::string("gradient buckets: ") + e.what();
    }
    at::Tensor flag = torch::tensor({why.empty() ? 0.0 : 1.0}, torch::kDouble).to(params.front().device());
    const auto agreed = group.all_reduce_sum({flag});
    if (!agreed || flag.item<double>() > 0) {
      reducer.reset();
      failed = !why.empty() ? why : !agreed ? agreed.message() : "another rank could not set up its gradient buckets";
      return nullptr;
    }
    return reducer.get();
  }

  // The parameters' gradients cleared: by AdamW's zero_grad() where there is one (its behaviour,
  // zeros or none, depends on the LibTorch version); the sharded optimiser needs none kept.
  void clear_grads() {
    if (adamw) return adamw->zero_grad();
    for (auto& p : params) p.mutable_grad() = at::Tensor();
  }
  void clear_compute_grads() {
    for (auto& c : compute) c.mutable_grad() = at::Tensor();
  }
  // After each micro-batch's backward: the compute copies' gradients are added, in the parameters'
  // dtype, to the parameters' gradients, so that accumulation across micro-batches happens in fp32
  // rather than in bf16.
  void accumulate_compute_grads() {
    for (std::size_t i = 0; i < compute.size(); ++i) {
      const at::Tensor& g = compute[i].grad();
      if (!g.defined()) continue;
      at::Tensor& master = params[i].mutable_grad();
      if (master.defined()) master.add_(g.to(master.scalar_type()));
      else master = g.to(params[i].scalar_type());
    }
    clear_compute_grads();
  }
  void refresh_compute() {
    at::NoGradGuard no_grad;
    for (std::size_t i = 0; i < compute.size(); ++i) compute[i].copy_(params[i]);
  }
  // Every gradient a step sums: the parameters', the compute copies' and a sharded optimiser's
  // fp32 sums (what a step that threw midway had summed must not reach the next).
  void clear_step_grads() {
    clear_grads();
    clear_compute_grads();
    if (sharded) sharded->clear_gradients();
  }

  /// Clips and applies the summed gradients (sharded: the optimiser reduces, clips and steps its
  /// shards, then gathers the model), filling `out`'s norm and whether it stepped. A step whose
  /// gradient norm is not finite leaves the weights alone.
  void apply_update(grpo_step_stats& out);
};

grpo_stepper::grpo_stepper(std::vector<at::Tensor> parameters, grpo_step_options opt)
    : grpo_stepper(std::move(parameters), opt, nullptr) {}

grpo_stepper::grpo_stepper(std::vector<at::Tensor> parameters, grpo_step_options opt,
                           std::unique_ptr<sharded_adamw> sharded) {
  if (opt.micro_batch_size < 1)
    throw std::invalid_argument("grpo_step_options.micro_batch_size: must be >= 1");
  if (!(opt.lr > 0)) throw std::invalid_argument("grpo_step_options.lr: must be > 0");
  if (opt.grad_bucket_bytes == 0) throw std::invalid_argument("grpo_step_options.grad_bucket_bytes: must be > 0");
  impl_ = std::make_unique<impl>(std::move(parameters), opt, std::move(sharded));
}
grpo_stepper::~grpo_stepper() = default;
grpo_stepper::grpo_stepper(grpo_stepper&&) noexcept = default;
grpo_stepper& grpo_stepper::operator=(grpo_stepper&&) noexcept = default;

void grpo_stepper::set_compute_parameters(std::vector<at::Tensor> compute) {
  if (!compute.empty() && compute.size() != impl_->params.size())
    throw std::invalid_argument("grpo stepper: " + std::to_string(compute.size()) + " compute parameters for " +
                                std::to_string(impl_->params.size()));
  impl_->compute = std::move(compute);
  impl_->reducer.reset();  // its hooks sit on the tensors backward ran on before
  impl_->refresh_compute();
}

const grpo_step_options& grpo_stepper::options() const noexcept { return impl_->opt; }
std::int64_t grpo_stepper::steps() const noexcept { return impl_->sharded ? impl_->sharded->steps() : impl_->steps; }
sharded_adamw* grpo_stepper::sharded() noexcept { return impl_->sharded.get(); }
const sharded_adamw* grpo_stepper::sharded() const noexcept { return impl_->sharded.get(); }

namespace {
// Next to the optimiser's own keys ("pytorch_version", "param_groups", "state").
constexpr const char* steps_key = "kforge_grpo_steps";
}  // namespace

status grpo_stepper::save_state(const std::string& path) const {
  if (impl_->sharded) return error{path + ": the optimiser state is sharded: each rank saves its own (sharded())"};
  try {
    torch::serialize::OutputArchive archive;
    impl_->adamw->save(archive);
    archive.write(steps_key, torch::tensor(impl_->steps, torch::kLong));
    archive.save_to(path);
  } catch (const std::exception& e) {
    return error{path + ": cannot write the optimiser state: " + e.what()};
  }
  return {};
}

namespace {

// LibTorch keys an optimiser's per-parameter state by the parameter's TensorImpl: as its printed
// address in 1.13 (a std::string), as the pointer itself in 2.x. One overload per spelling.
[[maybe_unused]] bool is_state_key_of(const std::string& key, const at::Tensor& p) {
  std::ostringstream s;
  s << p.unsafeGetTensorImpl();
  return s.str() == key;
}
[[maybe_unused]] bool is_state_key_of(const void* key, const at::Tensor& p) {
  return key == p.unsafeGetTensorImpl();
}

}  // namespace

status grpo_stepper::load_state(const std::string& path) {
  auto& st = *impl_;
  if (st.sharded) return error{path + ": the optimiser state is sharded: each rank loads its own (sharded())"};
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(path);
    at::Tensor steps;
    archive.read(steps_key, steps);
    // Load into a scratch optimiser over the same parameters first: a file that does not fit
    // (another model, a corrupt archive) must leave this one as it was.
    torch::optim::AdamW scratch(st.params, torch::optim::AdamWOptions(st.opt.lr));
    scratch.load(archive);
    for (const auto& [key, state] : scratch.state()) {
      auto* adam = dynamic_cast<torch::optim::AdamWParamState*>(state.get());
      if (adam == nullptr) throw std::runtime_error("state of another optimiser type");
      bool found = false;
      for (const auto& p : st.params)
        if (is_state_key_of(key, p)) {
          found = true;
          if (!adam->exp_avg().sizes().equals(p.sizes()))
            throw std::runtime_error("a moment's shape does not match its parameter's");
        }
      if (!found) throw std::runtime_error("state of a parameter this stepper does not hold");
    }
    st.adamw->load(archive);
    st.steps = steps.item<std::int64_t>();
  } catch (const std::exception& e) {
    return error{path + ": cannot load the optimiser state: " + e.what()};
  }
  return {};
}

namespace {

/// The tokens of `s` the loss covers: its completion, less the observations an episode's mask
/// leaves out.
std::int64_t trained_tokens(const grpo_sample& s) {
  if (s.completion_mask.empty()) return static_cast<std::int64_t>(s.completion.size());
  std::int64_t n = 0;
  for (const auto m : s.completion_mask) n += m != 0;
  return n;
}

/// Scales the gradients so that their global L2 norm is at most max_norm; returns the norm before.
/// (torch::nn::utils::clip_grad_norm_ does the same, but its header pulls in all of torch::nn.)
double clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm) {
  std::vector<at::Tensor> norms;
  for (const auto& p : params)
    if (p.grad().defined()) norms.push_back(p.grad().detach().norm(2).to(torch::kDouble));
  if (norms.empty()) return 0.0;
  const double total = torch::stack(norms).norm(2).item<double>();
  if (std::isfinite(total) && total > max_norm) {
    const double scale = max_norm / (total + 1e-6);
    for (const auto& p : params)
      if (p.grad().defined()) p.grad().detach().mul_(scale);
  }
  return total;
}

/// The samples the loss covers, their advantages and their trained tokens.
struct kept_samples {
  std::vector<const grpo_sample*> samples;
  std::vector<double> advantages;
  double tokens = 0;
};

/// The samples of `batch` the loss covers (all-equal groups may be skipped); the advantages go to
/// `out`. Throws on a sample whose log-probs or loss mask do not match its completion.
kept_samples keep_samples(const std::vector<grpo_group>& batch, const grpo_options& opt, grpo_step_stats& out) {
  std::vector<const grpo_sample*> all;
  std::vector<double> rewards;
  std::vector<std::int64_t> sizes;
  std::vector<std::vector<double>> baselines;
  for (const auto& g : batch) {
    sizes.push_back(static_cast<std::int64_t>(g.samples.size()));
    baselines.push_back(g.baseline);
    for (const auto& s : g.samples) {
      all.push_back(&s);
      rewards.push_back(s.reward);
    }
  }
  out.advantages = compute_advantages(rewards, sizes, opt, baselines);
  kept_samples kept;
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (!out.advantages.keep[i]) continue;
    const auto* s = all[i];
    if (!s->behaviour_logp.empty() && s->behaviour_logp.size() != s->completion.size())
      throw std::invalid_argument("grpo step: sample " + std::to_string(i) + " has " +
                                  std::to_string(s->behaviour_logp.size()) + " behaviour log-probs for " +
                                  std::to_string(s->completion.size()) + " completion tokens");
    if (!s->completion_mask.empty() && s->completion_mask.size() != s->completion.size())
      throw std::invalid_argument("grpo step: sample " + std::to_string(i) + " has a loss mask of " +
                                  std::to_string(s->completion_mask.size()) + " for " +
                                  std::to_string(s->completion.size()) + " completion tokens");
    kept.samples.push_back(s);
    kept.advantages.push_back(out.advantages.advantages[i]);
    kept.tokens += static_cast<double>(trained_tokens(*s));
  }
  return kept;
}

/// Token-weighted running sums of the per-micro-batch loss statistics.
struct stats_sum {
  grpo_loss_stats total;  // loss / policy_loss / kl_loss: already normalised by the batch's N
  void add(const grpo_loss_stats& s) {
    const auto w = static_cast<double>(s.tokens);
    total.loss += s.loss;
    total.policy_loss += s.policy_loss;
    total.kl_loss += s.kl_loss;
    total.mean_kl += w * s.mean_kl;
    total.mean_ratio += w * s.mean_ratio;
    total.clip_fraction += w * s.clip_fraction;
    total.clip_low_fraction += w * s.clip_low_fraction;
    total.clip_high_fraction += w * s.clip_high_fraction;
    total.mean_is_weight += w * s.mean_is_weight;
    total.is_truncated_fraction += w * s.is_truncated_fraction;
    total.tokens += s.tokens;
  }
  grpo_loss_stats mean() const {
    auto s = total;
    if (s.tokens == 0) return s;
    const auto n = static_cast<double>(s.tokens);
    for (double* f : {&s.mean_kl, &s.mean_ratio, &s.clip_fraction, &s.clip_low_fraction,
                      &s.clip_high_fraction, &s.mean_is_weight, &s.is_truncated_fraction})
      *f /= n;
    return s;
  }
};

// Data parallel: the gradients' sums started during the backward pass are finished (with
// `reducer`); then the statistics' sums and counts, and how many ranks failed their share, are
// summed across the ranks; then, without a reducer and unless one failed, the gradients — unless
// `sum_grads` is false (a sharded optimiser reduce-scatters them itself).
status sum_across(collective& group, const std::vector<at::Tensor>& params, gradient_reducer* reducer,
                  std::size_t bucket_bytes, bool sum_grads, stats_sum& sums, grpo_step_stats& out, bool failed_here) {
  std::string grads_failed;
  if (reducer) {
    if (auto s = reducer->finish(); !s) grads_failed = s.message();
    out.buckets_reduced_in_backward = static_cast<std::int64_t>(reducer->started_early());
  }
  failed_here = failed_here || !grads_failed.empty();
  grpo_loss_stats& t = sums.total;
  std::vector<double*> fields = {&t.loss, &t.policy_loss, &t.kl_loss, &t.mean_kl, &t.mean_ratio,
                                 &t.clip_fraction, &t.clip_low_fraction, &t.clip_high_fraction,
                                 &t.mean_is_weight, &t.is_truncated_fraction};
  std::vector<double> host;
  for (const double* f : fields) host.push_back(*f);
  host.push_back(static_cast<double>(t.tokens));
  host.push_back(static_cast<double>(out.micro_batches));
  host.push_back(static_cast<double>(out.stale_samples));
  host.push_back(failed_here ? 1.0 : 0.0);
  const auto device = params.empty() ? torch::Device(torch::kCPU) : params.front().device();
  at::Tensor v = torch::tensor(host, torch::kDouble).to(device);
  if (auto s = group.all_reduce_sum({v}); !s) return s;
  v = v.cpu();
  const double* p = v.data_ptr<double>();
  for (std::size_t i = 0; i < fields.size(); ++i) *fields[i] = p[i];
  t.tokens = static_cast<std::int64_t>(p[fields.size()]);
  out.micro_batches = static_cast<std::int64_t>(p[fields.size() + 1]);
  out.stale_samples = static_cast<std::int64_t>(p[fields.size() + 2]);
  if (!grads_failed.empty()) return error{grads_failed};
  if (const auto failed = static_cast<int>(p[fields.size() + 3]); failed > 0)
    return error{std::to_string(failed) + " rank(s) failed their share of the batch"};
  if (reducer || !sum_grads) return {};
  return all_reduce_gradients(params, group, bucket_bytes);
}

at::Tensor checked_logp(const at::Tensor& t, std::int64_t rows, std::int64_t cols,
                        const char* which) {
  if (!t.defined() || t.dim() != 2 || t.size(0) != rows || t.size(1) < cols)
    throw std::invalid_argument(std::string("grpo step: the ") + which +
                                " log-prob function must return [B, T] with B = " +
                                std::to_string(rows) + ", T >= " + std::to_string(cols));
  return t.narrow(1, 0, cols);
}

// The loss's inputs for micro-batch `mb`, the kept samples from `begin` on (`adv`: the kept
// samples' advantages); nullopt where it has no completion tokens. Its off-policy rows are
// counted into `stale`.
std::optional<grpo_loss_inputs> loss_inputs(const std::vector<const grpo_sample*>& mb, const std::vector<double>& adv,
                                            std::size_t begin, std::uint64_t current_version,
                                            bool correct_off_policy, const logprob_fn& policy,
                                            const logprob_fn& reference, std::int64_t& stale) {
  const auto rows = static_cast<std::int64_t>(mb.size());
  std::int64_t cols = 0;
  for (const auto* s : mb) cols = std::max(cols, static_cast<std::int64_t>(s->completion.size()));
  if (cols == 0) return std::nullopt;

  grpo_loss_inputs in;
  in.logp = checked_logp(policy(mb), rows, cols, "policy");
  const auto dev = in.logp.device();
  auto mask = torch::zeros({rows, cols}, torch::kBool);
  auto advantages = torch::empty({rows}, torch::kDouble);
  for (std::int64_t r = 0; r < rows; ++r) {
    const auto* s = mb[static_cast<std::size_t>(r)];
    const auto n = static_cast<std::int64_t>(s->completion.size());
    if (s->completion_mask.empty())
      mask[r].narrow(0, 0, n).fill_(true);
    else
      mask[r].narrow(0, 0, n).copy_(
          torch::from_blob(const_cast<std::uint8_t*>(s->completion_mask.data()), {n}, torch::kUInt8).to(torch::kBool));
    advantages[r] = adv[begin + static_cast<std::size_t>(r)];
  }
  in.mask = mask.to(dev);
  in.advantages = advantages.to(dev);

  if (correct_off_policy) {
    // Rows without correction get their own detached log-probs as behaviour: weight exactly 1.
    auto behaviour = in.logp.detach().to(torch::kFloat).cpu().clone();
    bool any = false;
    for (std::int64_t r = 0; r < rows; ++r) {
      const auto* s = mb[static_cast<std::size_t>(r)];
      if (s->behaviour_logp.empty() || s->policy_version >= current_version) continue;
      any = true;
      ++stale;
      const auto n = static_cast<std::int64_t>(s->behaviour_logp.size());
      behaviour[r].narrow(0, 0, n).copy_(
          torch::from_blob(const_cast<float*>(s->behaviour_logp.data()), {n}, torch::kFloat));
    }
    if (any) in.behaviour_logp = behaviour.to(dev);
  }
  if (reference) {
    torch::NoGradGuard no_grad;
    in.ref_logp = checked_logp(reference(mb), rows, cols, "reference").detach();
  }
  return in;
}

}  // namespace

void grpo_stepper::impl::apply_update(grpo_step_stats& out) {
  if (sharded) {
    // Every rank reaches this with its own gradients (the agreement before failed none): the
    // optimiser sums, clips and steps them, and leaves the whole new model on every rank.
    auto r = sharded->step();
    if (!r) {
      clear_grads();
      throw std::runtime_error("grpo step: " + r.message());
    }
    out.grad_norm = r->grad_norm;
    out.grad_clipped = r->grad_clipped;
    if (!r->stepped) return;  // a diverged step: no rank changed its weights
    refresh_compute();
    out.stepped = true;
    return;
  }
  const double max_norm = opt.max_grad_norm > 0 ? opt.max_grad_norm : std::numeric_limits<double>::infinity();
  out.grad_norm = clip_grad_norm(params, max_norm);
  out.grad_clipped = out.grad_norm > max_norm;
  if (!std::isfinite(out.grad_norm)) {  // a diverged step must not reach the weights
    clear_grads();
    return;
  }
  adamw->step();
  clear_grads();
  refresh_compute();
  ++steps;
  out.stepped = true;
}

grpo_step_stats grpo_stepper::step(const std::vector<grpo_group>& batch, const logprob_fn& policy,
                                   const logprob_fn& reference, double kl_coef,
                                   std::uint64_t current_version, collective* group) {
  auto& st = *impl_;
  grpo_step_stats out;
  out.kl_coef = kl_coef;

  const kept_samples kept_set = keep_samples(batch, st.opt.grpo, out);
  const auto& kept = kept_set.samples;
  const auto& kept_adv = kept_set.advantages;
  const double batch_tokens = kept_set.tokens;
  out.samples = static_cast<std::int64_t>(kept.size());
  if (kept.empty() || batch_tokens == 0) return out;  // the same on every rank: none waits for another

  // This rank's contiguous share of the kept samples (all of them without a group).
  const std::size_t ranks = group != nullptr ? static_cast<std::size_t>(group->size()) : 1;
  const std::size_t rank = group != nullptr ? static_cast<std::size_t>(group->rank()) : 0;
  const std::size_t share_begin = kept.size() * rank / ranks;
  const std::size_t share_end = kept.size() * (rank + 1) / ranks;

  stats_sum sums;
  st.clear_step_grads();
  const auto mbs = static_cast<std::size_t>(st.opt.micro_batch_size);
  const bool parallel = group != nullptr && ranks > 1;
  // A rank whose share fails (out of memory, say) must still reach the agreement below, or the
  // other ranks would wait in the all-reduce forever: every rank then fails the step.
  std::string failed_here;
  // Sharded: the gradients are reduce-scattered by the optimiser, not all-reduced during backward.
  gradient_reducer* reducer = parallel && !st.sharded ? st.reducer_for(*group, failed_here) : nullptr;
  const auto micro_batch = [&](std::size_t begin, std::size_t end) {
    const std::vector<const grpo_sample*> mb(kept.begin() + static_cast<std::ptrdiff_t>(begin),
                                             kept.begin() + static_cast<std::ptrdiff_t>(end));
    auto in = loss_inputs(mb, kept_adv, begin, current_version, st.opt.correct_off_policy, policy, reference,
                          out.stale_samples);
    if (!in) return;  // no completion tokens in it
    auto res = grpo_loss(*in, st.opt.grpo, kl_coef, batch_tokens);
    if (reducer && end == share_end) reducer->arm();  // this rank's last backward pass
    res.loss.backward();
    st.accumulate_compute_grads();
    sums.add(res.stats);
    ++out.micro_batches;
  };
  // A sharded optimiser over bf16 weights sums every micro-batch into its fp32 shard as it comes
  // (sharded_adamw.hpp): a collective, so every rank takes as many rounds as the largest share has
  // micro-batches, a rank out of samples (or failed) adding none.
  const bool sum_each = st.sharded && st.sharded->sums_each_micro_batch();
  const std::size_t rounds = ((kept.size() + ranks - 1) / ranks + mbs - 1) / mbs;
  for (std::size_t k = 0; k < rounds; ++k) {
    const std::size_t begin = share_begin + k * mbs;
    if (failed_here.empty() && begin < share_end) {
      try {
        micro_batch(begin, std::min(share_end, begin + mbs));
      } catch (const std::exception& e) {
        if (!parallel) throw;
        failed_here = e.what();
      }
    }
    if (!sum_each) continue;
    if (auto s = st.sharded->accumulate(); !s) {
      if (!parallel) throw std::runtime_error("grpo step: " + s.message());
      if (failed_here.empty()) failed_here = s.message();
      break;  // its group failed: no later round could sum
    }
  }
  if (parallel) {
    auto s = sum_across(*group, st.params, reducer, st.opt.grad_bucket_bytes, /*sum_grads=*/!st.sharded, sums, out,
                        !failed_here.empty());
    if (!failed_here.empty() || !s) {
      st.clear_step_grads();
      throw std::runtime_error("grpo step: " + (failed_here.empty() ? s.message() : failed_here));
    }
  }
  out.loss = sums.mean();

  st.apply_update(out);
  return out;
}

}  // namespace kforge::trainer

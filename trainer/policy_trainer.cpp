#include "trainer/policy_trainer.hpp"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/detail/CUDAHooksInterface.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <sstream>
#include <stdexcept>

#include "model/lora.hpp"
#include "model/weights.hpp"
#include "trainer/checkpoint.hpp"
#include "trainer/sharded_adamw.hpp"

namespace kforge::trainer {
namespace {

namespace fs = std::filesystem;

/// A copy of `policy`'s weights on its device in `dtype`: frozen (no grad, eval mode) for the
/// reference, or trainable (train mode) for a mixed-precision compute copy.
model::CausalLM copy_of(model::CausalLM& policy, at::ScalarType dtype, bool trainable) {
  model::CausalLM out(policy->config);
  out->to(policy->output_weight().device(), dtype);
  at::NoGradGuard no_grad;
  const auto src = policy->named_parameters(/*recurse=*/true);
  for (auto& item : out->named_parameters(/*recurse=*/true)) {
    item.value().copy_(src[item.key()]);
    item.value().set_requires_grad(trainable);
  }
  const auto src_buf = policy->named_buffers(/*recurse=*/true);
  for (auto& item : out->named_buffers(/*recurse=*/true)) item.value().copy_(src_buf[item.key()]);
  if (trainable) out->train();
  else out->eval();
  return out;
}

/// Completion log-probs of `lm` under the sampling temperature (generate()'s convention).
logprob_fn logprobs_of(model::CausalLM lm, double temperature, std::int64_t pad) {
  return [lm, temperature, pad](const std::vector<const grpo_sample*>& samples) mutable {
    const auto packed = pack_sequences(samples, pad);
    const auto dev = lm->output_weight().device();
    return gather_completion_logp(lm->forward(packed.tokens.to(dev)), packed, temperature);
  };
}

/// The reference of LoRA training: `lm` with its adapters off.
logprob_fn logprobs_without_adapters(model::CausalLM lm, double temperature, std::int64_t pad) {
  return [lm, fn = logprobs_of(lm, temperature, pad)](const std::vector<const grpo_sample*>& samples) {
    model::lora_disabled off(*lm);
    return fn(samples);
  };
}

/// With LoRA: the policy in the compute dtype with adapters on it (base frozen). Else as given.
model::CausalLM prepared(model::CausalLM policy, const policy_trainer_options& o) {
  if (!o.lora) return policy;
  // The base never changes, so it needs no fp32 master copy: it is kept in the dtype computed in.
  if (o.bf16_compute) policy->to(at::kBFloat16);
  if (auto s = model::attach_lora(*policy, *o.lora); !s)
    throw std::invalid_argument("policy_trainer_options." + s.message());
  return policy;
}

/// The optimiser over what trains: the adapters (LoRA), else the policy's parameters, or with
/// shard_optimizer the sharded optimiser over the parameters backward runs on — `compute`, with
/// the fp32 `policy` giving the master shards their first values where compute is its bf16 copy.
grpo_stepper stepper_for(model::CausalLM& policy, model::CausalLM& compute, const policy_trainer_options& o) {
  if (o.lora) {
    if (o.shard_optimizer)
      throw std::invalid_argument("policy_trainer_options.shard_optimizer: shards full fine-tuning's optimiser state; "
                                  "with lora only the small adapters train: remove one of the two");
    return grpo_stepper(model::lora_parameters(*policy), o.step);
  }
  if (!o.shard_optimizer) return grpo_stepper(policy->parameters(/*recurse=*/true), o.step);
  sharded_adamw_options so;
  so.lr = o.step.lr;
  so.beta1 = o.step.beta1;
  so.beta2 = o.step.beta2;
  so.eps = o.step.adam_eps;
  so.weight_decay = o.step.weight_decay;
  so.max_grad_norm = o.step.max_grad_norm;
  so.bucket_bytes = o.step.grad_bucket_bytes;
  auto params = compute->parameters(/*recurse=*/true);
  const auto masters = compute.ptr() == policy.ptr() ? std::vector<at::Tensor>{} : policy->parameters(/*recurse=*/true);
  auto sharded = std::make_unique<sharded_adamw>(params, o.group, so, masters);
  return grpo_stepper(std::move(params), o.step, std::move(sharded));
}

/// This rank's shard file name in a checkpoint of `group` (null: one rank).
std::string shard_file_of(const std::shared_ptr<collective>& group) {
  return sharded_optimizer_file(group ? group->rank() : 0, group ? group->size() : 1);
}

std::vector<at::Generator> default_generators() {
  std::vector<at::Generator> gens{at::globalContext().defaultGenerator(at::DeviceType::CPU)};
  if (at::hasCUDA())
    for (int i = 0; i < at::detail::getCUDAHooks().getNumGPUs(); ++i)
      gens.push_back(at::globalContext().defaultGenerator(
          at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(i))));
  return gens;
}

std::vector<std::uint8_t> generator_state(at::Generator gen) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  const at::Tensor t = gen.get_state().contiguous();
  std::vector<std::uint8_t> out(static_cast<std::size_t>(t.nbytes()));
  std::memcpy(out.data(), t.data_ptr(), out.size());
  return out;
}

void set_generator_state(at::Generator gen, const std::vector<std::uint8_t>& bytes) {
  at::Tensor t = at::empty({static_cast<std::int64_t>(bytes.size())}, at::kByte);
  std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(t);
}

status check_tokens(const std::vector<std::int64_t>& ids, std::int64_t vocab, const std::string& what) {
  for (auto id : ids)
    if (id < 0 || id >= vocab)
      return error{what + ": token " + std::to_string(id) + " is outside the vocabulary [0, " +
                   std::to_string(vocab) + ")"};
  return {};
}

/// Under [agent] reward = "turn_returns": the group's episodes as one sample a turn
/// (split_by_turn), where the group holds two or more episodes with returns. A lone episode stays
/// whole and keeps the group's draws as its baseline: against its own turns alone it would be
/// normalised against itself, and a one-turn episode alone would teach nothing. `returns[i]` are
/// group.samples[i]'s. Returns whether any episode was split (the draws then set no baseline).
bool split_turns(grpo_group& group, const std::vector<const std::vector<double>*>& returns,
                 policy_step_stats& out) {
  const auto with_returns = std::count_if(returns.begin(), returns.end(), [](auto* r) { return !r->empty(); });
  if (with_returns == 0) return false;
  if (with_returns < 2) {
    out.whole_episodes += with_returns;
    return false;
  }
  std::vector<grpo_sample> samples;
  bool split = false;
  for (std::size_t i = 0; i < group.samples.size(); ++i) {
    auto turns = returns[i]->empty() ? std::vector<grpo_sample>{} : split_by_turn(group.samples[i], *returns[i]);
    if (turns.empty()) {
      out.whole_episodes += !returns[i]->empty();  // its turns did not match its returns
      samples.push_back(std::move(group.samples[i]));
      continue;
    }
    for (auto& t : turns) samples.push_back(std::move(t));
    ++out.split_episodes;
    split = true;
  }
  group.samples = std::move(samples);
  return split;
}

}  // namespace

std::string format_step_log(const policy_step_stats& s) {
  std::ostringstream o;
  o.precision(6);
  o << "step=" << s.step << " batch=" << s.batch_step << " version=" << s.policy_version
    << " stepped=" << (s.grpo.stepped ? 1 : 0) << " loss=" << s.grpo.loss.loss
    << " pg_loss=" << s.grpo.loss.policy_loss << " kl=" << s.grpo.loss.mean_kl
    << " kl_coef_used=" << s.grpo.kl_coef << " kl_coef=" << s.kl.coef
    << " kl_window=" << s.kl.window_mean << " reward=" << s.grpo.advantages.reward_mean
    << " ratio=" << s.grpo.loss.mean_ratio << " clip=" << s.grpo.loss.clip_fraction
    << " is_w=" << s.grpo.loss.mean_is_weight << " grad_norm=" << s.grpo.grad_norm
    << " samples=" << s.grpo.samples << " stale=" << s.grpo.stale_samples
    << " excluded=" << s.excluded_samples << " groups=" << s.grpo.advantages.groups
    << " equal_groups=" << s.grpo.advantages.equal_groups
    << " draw_signal_groups=" << s.grpo.advantages.draw_signal_groups << " tokens=" << s.completion_tokens
    << " s=" << s.seconds;
  return o.str();
}

struct policy_trainer::impl {
  impl(model::CausalLM p, policy_trainer_options o)
      : policy(prepared(std::move(p), o)),
        opt(std::move(o)),
        compute(opt.bf16_compute && !opt.lora ? copy_of(policy, at::kBFloat16, /*trainable=*/true) : policy),
        reference(opt.lora ? policy
                           : copy_of(policy, opt.bf16_compute ? at::kBFloat16 : policy->output_weight().scalar_type(),
                                     /*trainable=*/false)),
        stepper(stepper_for(policy, compute, opt)),
        kl(opt.kl),
        version(opt.initial_version) {
    // Sharded over bf16: the fp32 masters are the ranks' shards now, so no rank keeps them whole.
    if (stepper.sharded()) policy = compute;
    else if (has_compute_copy()) stepper.set_compute_parameters(compute->parameters(/*recurse=*/true));
    compute->model->checkpoint_layers = opt.activation_checkpointing;
  }
  /// A bf16 copy computed on beside the fp32 policy, its gradients moved into the policy's.
  bool has_compute_copy() const { return policy.ptr() != compute.ptr(); }
  /// The master weights: what is optimised, published and checkpointed; with shard_optimizer the
  /// model the ranks' master shards are gathered into (compute).
  model::CausalLM policy;
  policy_trainer_options opt;
  model::CausalLM compute;  ///< what forward and backward run on: `policy`, or its bf16 copy
  model::CausalLM reference;  ///< with LoRA: `policy` itself, run with its adapters off
  grpo_stepper stepper;
  kl_controller kl;
  std::int64_t steps = 0;
  std::uint64_t version = 0;
  log_sink sink;
};

policy_trainer::policy_trainer(model::CausalLM policy, policy_trainer_options options) {
  if (!policy) throw std::invalid_argument("policy_trainer: no policy model");
  if (!(options.temperature >= 0))
    throw std::invalid_argument("policy_trainer_options.temperature: must be >= 0");
  if (auto s = validate(options.kl); !s)
    throw std::invalid_argument("policy_trainer_options.kl: " + s.message());
  impl_ = std::make_unique<impl>(std::move(policy), std::move(options));
}
policy_trainer::~policy_trainer() = default;
policy_trainer::policy_trainer(policy_trainer&&) noexcept = default;
policy_trainer& policy_trainer::operator=(policy_trainer&&) noexcept = default;

result<policy_step_stats> policy_trainer::step(const train_batch& batch) {
  auto& st = *impl_;
  const auto start = std::chrono::steady_clock::now();
  policy_step_stats out;
  out.batch_step = batch.step;

  const std::int64_t vocab = st.policy->config.vocab_size;
  std::vector<grpo_group> groups;
  groups.reserve(batch.groups.size());
  for (std::size_t g = 0; g < batch.groups.size(); ++g) {
    grpo_group group;
    std::vector<const std::vector<double>*> returns;  // each kept sample's turn returns
    for (std::size_t i = 0; i < batch.groups[g].samples.size(); ++i) {
      const auto& s = batch.groups[g].samples[i];
      if (!s.excluded.empty()) {
        ++out.excluded_samples;
        continue;
      }
      const std::string where = "train batch " + std::to_string(batch.step) + ": group " +
                                std::to_string(g) + ", sample " + std::to_string(i);
      if (s.prompt_tokens.empty()) return error{where + ": empty prompt"};
      if (!s.logprobs.empty() && s.logprobs.size() != s.completion_tokens.size())
        return error{where + ": " + std::to_string(s.logprobs.size()) + " log-probs for " +
                     std::to_string(s.completion_tokens.size()) + " completion tokens"};
      if (!s.completion_mask.empty() && s.completion_mask.size() != s.completion_tokens.size())
        return error{where + ": a loss mask of " + std::to_string(s.completion_mask.size()) + " for " +
                     std::to_string(s.completion_tokens.size()) + " completion tokens"};
      if (auto c = check_tokens(s.prompt_tokens, vocab, where + " prompt"); !c) return c.err();
      if (auto c = check_tokens(s.completion_tokens, vocab, where + " completion"); !c) return c.err();
      grpo_sample gs;
      gs.prompt = s.prompt_tokens;
      gs.completion = s.completion_tokens;
      gs.reward = s.reward;
      gs.behaviour_logp = s.logprobs;
      gs.completion_mask = s.completion_mask;
      gs.policy_version = s.policy_version;
      group.samples.push_back(std::move(gs));
      returns.push_back(&s.turn_returns);
    }
    const bool by_turn = split_turns(group, returns, out);
    // The draws carry one reward an episode, not a turn's return: a group of turns is its own
    // baseline.
    if (st.opt.baseline_from_draws && !by_turn) group.baseline = batch.groups[g].draw_rewards;
    // A group left empty by exclusions has nothing to train on (and no group of size 0 exists).
    if (!group.samples.empty()) groups.push_back(std::move(group));
  }

  st.compute->train();
  try {
    out.grpo = st.stepper.step(groups, logprobs_of(st.compute, st.opt.temperature, st.opt.pad_token),
                               st.opt.lora ? logprobs_without_adapters(st.reference, st.opt.temperature, st.opt.pad_token)
                                           : logprobs_of(st.reference, st.opt.temperature, st.opt.pad_token),
                               st.kl.coef(), st.version, st.opt.group.get());
  } catch (const std::exception& e) {
    st.compute->eval();
    return error{"train batch " + std::to_string(batch.step) + ": " + e.what()};
  }
  // Training mode for the step only: LoRA's dropout must not reach whatever samples from the
  // policy between steps.
  st.compute->eval();
  out.completion_tokens = out.grpo.loss.tokens;
  ++st.version;  // every batch, see the header
  if (out.grpo.stepped) {
    out.kl = st.kl.update(out.grpo.loss.mean_kl);
  } else {  // nothing trained on: no KL measured, the coefficient stays
    out.kl.coef = st.kl.coef();
    out.kl.window_mean = st.kl.window_mean();
    out.kl.accepted = false;
  }
  ++st.steps;
  out.step = st.steps;
  out.policy_version = st.version;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (st.sink) st.sink(out);
  return out;
}

status policy_trainer::save_optimizer_shard(const std::string& dir) const {
  const auto& st = *impl_;
  if (!st.stepper.sharded()) return {};
  return st.stepper.sharded()->save_state((fs::path(dir) / shard_file_of(st.opt.group)).string());
}

status policy_trainer::save_checkpoint(const std::string& dir, const shard_writer& other_shards) {
  auto& st = *impl_;
  const bool others = st.stepper.sharded() && st.opt.group && st.opt.group->size() > 1;
  if (others && !other_shards)
    return error{dir + ": the optimiser state is sharded over " + std::to_string(st.opt.group->size()) +
                 " ranks, and no way to have the other ranks write their shards was given"};
  auto tmp = begin_checkpoint_dir(dir);
  if (!tmp) return tmp.err();
  const fs::path path(*tmp);
  status s = st.opt.source_dir.empty()
                 ? model::save_weights(*st.policy, (path / checkpoint_weights_file).string())
                 : model::save_checkpoint(*st.policy, *tmp, st.opt.source_dir);
  if (!s) return s;
  // With LoRA the weights above are merged (a loadable model); what resumes is the adapters.
  if (st.opt.lora)
    if (s = model::save_lora(*st.policy, *tmp, st.opt.source_dir); !s) return s;
  if (st.stepper.sharded()) {
    if (s = save_optimizer_shard(*tmp); !s) return s;
    if (others)
      if (s = other_shards(*tmp); !s) return error{dir + ": the other ranks' optimiser shards: " + s.message()};
  } else if (s = st.stepper.save_state((path / checkpoint_optimizer_file).string()); !s) {
    return s;
  }
  trainer_state ts;
  ts.step = st.steps;
  ts.policy_version = st.version;
  ts.seed = st.opt.seed;
  ts.kl_controller = st.kl.to_json();
  try {
    const auto gens = default_generators();
    ts.cpu_rng = generator_state(gens.front());
    for (std::size_t i = 1; i < gens.size(); ++i) ts.cuda_rng.push_back(generator_state(gens[i]));
  } catch (const std::exception& e) {
    return error{dir + ": cannot read the random generators' state: " + e.what()};
  }
  if (s = write_trainer_state(*tmp, ts); !s) return s;
  return commit_checkpoint_dir(dir);
}

status policy_trainer::load_checkpoint(const std::string& dir) {
  auto& st = *impl_;
  auto ts = read_checkpoint_state(dir);
  if (!ts) return ts.err();
  if (ts->seed != st.opt.seed)
    return error{dir + ": seed " + std::to_string(ts->seed) + " differs from this run's " +
                 std::to_string(st.opt.seed)};
  kl_controller kl(st.opt.kl);
  if (auto s = kl.from_json(ts->kl_controller); !s) return error{dir + ": " + s.message()};
  if (st.opt.lora) {
    // The frozen base is the starting checkpoint's, as this trainer was built; the merged
    // model.safetensors is for samplers and evaluation, not read back.
    if (auto s = model::load_lora(*st.policy, dir); !s) return s;
  } else {
    auto tensors = model::checkpoint_tensors::open((fs::path(dir) / checkpoint_weights_file).string());
    if (!tensors) return tensors.err();
    if (auto s = model::load_weights(*st.policy, *tensors); !s) return s;
  }
  if (st.has_compute_copy()) st.stepper.set_compute_parameters(st.compute->parameters(/*recurse=*/true));
  if (auto* sharded = st.stepper.sharded()) {
    // The masters in the shard equal the policy just loaded (the policy is what the optimiser
    // all-gathers its masters into), so no gather is needed: loading stays free of collectives
    // and the ranks may load one after another.
    const fs::path shard = fs::path(dir) / shard_file_of(st.opt.group);
    std::error_code ec;
    if (!fs::exists(shard, ec))
      return error{shard.string() + ": missing: " +
                   (fs::exists(fs::path(dir) / checkpoint_optimizer_file, ec)
                        ? std::string("the checkpoint was written without trainer.shard_optimizer")
                        : "resume a sharded optimiser with the same number of ranks")};
    if (auto s = sharded->load_state(shard.string()); !s) return s;
  } else if (auto s = st.stepper.load_state((fs::path(dir) / checkpoint_optimizer_file).string()); !s) {
    return s;
  }
  try {
    const auto gens = default_generators();
    set_generator_state(gens.front(), ts->cpu_rng);
    // A checkpoint from a host with other GPUs restores the devices both have.
    for (std::size_t i = 1; i < gens.size() && i - 1 < ts->cuda_rng.size(); ++i)
      set_generator_state(gens[i], ts->cuda_rng[i - 1]);
  } catch (const std::exception& e) {
    return error{dir + ": cannot restore the random generators' state: " + e.what()};
  }
  st.kl = std::move(kl);
  st.steps = ts->step;
  st.version = ts->policy_version;
  return {};
}

void policy_trainer::set_log_sink(log_sink sink) { impl_->sink = std::move(sink); }
status policy_trainer::save_adapters(const std::string& dir) const {
  const auto& st = *impl_;
  if (!st.opt.lora) return error{"the policy has no LoRA adapters to save (trainer.lora is not set)"};
  return model::save_lora(*st.policy, dir, st.opt.source_dir);
}

model::CausalLM& policy_trainer::policy() noexcept { return impl_->policy; }
model::CausalLM& policy_trainer::compute_model() noexcept { return impl_->compute; }
const model::CausalLM& policy_trainer::reference() const noexcept { return impl_->reference; }
const kl_controller& policy_trainer::kl() const noexcept { return impl_->kl; }
const grpo_stepper& policy_trainer::stepper() const noexcept { return impl_->stepper; }
std::int64_t policy_trainer::steps() const noexcept { return impl_->steps; }
std::uint64_t policy_trainer::policy_version() const noexcept { return impl_->version; }
const policy_trainer_options& policy_trainer::options() const noexcept { return impl_->opt; }

}  // namespace kforge::trainer

#include "runtime/memory_plan.hpp"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <sstream>

#include "model/prefill_scratch.hpp"  // a constant only: in every build
#if defined(KFORGE_HAVE_MODEL_CONFIG)
#include "model/config.hpp"
#endif

namespace kforge::pipeline {

namespace {

constexpr double bf16 = 2, fp32 = 4;

memory_estimate sorted(memory_estimate e) {
  std::sort(e.parts.begin(), e.parts.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return e;
}

std::string line(const memory_estimate& e) {
  std::string parts;
  for (const auto& [what, bytes] : e.parts) parts += (parts.empty() ? "" : ", ") + what + " " + gib(bytes);
  return e.stage + ": " + gib(e.total()) + " (" + parts + ")";
}

}  // namespace

std::int64_t policy_shape::parameters() const {
  const std::int64_t q = heads * head_dim, kv = kv_heads * head_dim;
  const std::int64_t attention = hidden * q + q + 2 * (hidden * kv + kv) + q * hidden;
  const std::int64_t mlp = 3 * hidden * intermediate;
  const std::int64_t per_layer = attention + mlp + 2 * hidden;
  return vocab * hidden * (tied_embeddings ? 1 : 2) + layers * per_layer + hidden;
}

std::int64_t policy_shape::lora_parameters(std::int64_t rank, const std::vector<std::string>& targets) const {
  const std::int64_t q = heads * head_dim, kv = kv_heads * head_dim;
  std::int64_t per_layer = 0;
  for (const auto& t : targets) {
    const std::pair<std::int64_t, std::int64_t> in_out = t == "q_proj"      ? std::make_pair(hidden, q)
                                                         : t == "k_proj"    ? std::make_pair(hidden, kv)
                                                         : t == "v_proj"    ? std::make_pair(hidden, kv)
                                                         : t == "o_proj"    ? std::make_pair(q, hidden)
                                                         : t == "gate_proj" ? std::make_pair(hidden, intermediate)
                                                         : t == "up_proj"   ? std::make_pair(hidden, intermediate)
                                                         : t == "down_proj" ? std::make_pair(intermediate, hidden)
                                                                            : std::make_pair(std::int64_t{0}, std::int64_t{0});
    per_layer += rank * (in_out.first + in_out.second);
  }
  return layers * per_layer;
}

result<policy_shape> policy_shape_of(const std::string& model_dir) {
#if defined(KFORGE_HAVE_MODEL_CONFIG)
  auto c = model::load_model_config(model_dir);
  if (!c) return c.err();
  policy_shape p;
  p.hidden = c->hidden_size;
  p.intermediate = c->intermediate_size;
  p.layers = c->num_hidden_layers;
  p.heads = c->num_attention_heads;
  p.kv_heads = c->num_key_value_heads;
  p.head_dim = c->head_dim;
  p.vocab = c->vocab_size;
  p.tied_embeddings = c->tie_word_embeddings;
  return p;
#else
  return error{model_dir + ": this kforge is built without the model library, so it cannot read config.json"};
#endif
}

double memory_estimate::total() const {
  return std::accumulate(parts.begin(), parts.end(), 0.0, [](double s, const auto& p) { return s + p.second; });
}

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", bytes / (1024.0 * 1024 * 1024));
  return buf;
}

std::int64_t planned_sequence_tokens(const sampler_options& s, const agent_options& a) {
  const std::int64_t turns = std::max(1, a.max_turns);
  std::int64_t seq = planned_prompt_tokens + turns * s.max_new_tokens +
                     (turns - 1) * static_cast<std::int64_t>(a.observation_max_tokens);
  // A run's next turn starts from under max_tokens of context before its observation is added.
  if (a.max_tokens > 0)
    seq = std::min(seq, static_cast<std::int64_t>(a.max_tokens + (turns > 1 ? a.observation_max_tokens : 0)) +
                            s.max_new_tokens);
  return seq;
}

std::int64_t planned_sampler_rows(const sampler_options& s, const agent_options& a) {
  const std::int64_t groups = static_cast<std::int64_t>(s.batch_requests) * s.group_size;
  // A call of turns takes as many rows as one of groups (the engine's max_turn_batch).
  return a.max_turns > 1 && s.batch_turns_with_groups ? 2 * groups : groups;
}

memory_estimate sampler_memory(const policy_shape& p, const sampler_options& s, std::int64_t sequence_tokens,
                               const agent_options& a) {
  const double params = static_cast<double>(p.parameters());
  const double rows = static_cast<double>(planned_sampler_rows(s, a));
  const double seq = static_cast<double>(sequence_tokens);
  const double kv = rows * seq * static_cast<double>(p.layers) * 2 * static_cast<double>(p.kv_heads * p.head_dim) * bf16;
  return sorted({"sampler", {{"weights (bf16)", params * bf16},
                             {"KV cache (" + std::to_string(static_cast<long long>(rows)) + " sequences)", kv},
                             {"logits (fp32)", rows * static_cast<double>(p.vocab) * fp32},
                             {"prefill attention scratch (bounded)", model::default_prefill_scratch_bytes}}});
}

memory_estimate sandbox_memory(int runners_per_gpu) {
  return {"sandbox", {{std::to_string(runners_per_gpu) + " candidate children", runners_per_gpu * planned_child_bytes}}};
}

memory_estimate trainer_memory(const policy_shape& p, const trainer_options& t, std::int64_t sequence_tokens,
                               std::int64_t ranks) {
  const double params = static_cast<double>(p.parameters());
  const double seq = static_cast<double>(sequence_tokens);
  const double tokens = static_cast<double>(t.micro_batch) * seq;
  // What one layer keeps for backward per token, in bf16 elements: the norms' inputs and outputs,
  // q, k, v, the attention output and its projection's input, the residuals, the MLP's gate, up,
  // activation and product; plus the attention probabilities (heads x sequence) of an attention
  // without a fused kernel.
  const double per_token_layer = 8.0 * p.hidden + 2.0 * p.kv_heads * p.head_dim + 4.0 * p.intermediate +
                                 static_cast<double>(p.heads) * seq;
  memory_estimate e{"trainer", {}};
  if (t.lora.enabled) {
    const double adapters = static_cast<double>(p.lora_parameters(t.lora.rank, t.lora.targets));
    e.parts.push_back({"frozen weights, also the reference (bf16)", params * bf16});
    e.parts.push_back({"LoRA adapters, gradients and AdamW moments (fp32)", 4 * adapters * fp32});
  } else if (t.shard_optimizer && ranks > 1) {
    const double n = static_cast<double>(ranks);
    const std::string share = "1/" + std::to_string(ranks);
    // The bf16 weights are the only whole copy: the fp32 masters exist as the ranks' shards, and
    // each micro-batch's gradients are summed into this rank's fp32 share as they come.
    e.parts.push_back({"weights and reference (bf16)", 2 * params * bf16});
    e.parts.push_back({"gradients of a micro-batch (bf16)", params * bf16});
    e.parts.push_back({"master weights, " + share + " (fp32)", params * fp32 / n});
    e.parts.push_back({"summed gradients, " + share + " (fp32)", params * fp32 / n});
    e.parts.push_back({"AdamW moments, " + share + " (fp32)", 2 * params * fp32 / n});
  } else {
    e.parts.push_back({"weights and reference (bf16)", 2 * params * bf16});
    e.parts.push_back({"gradients of a micro-batch (bf16)", params * bf16});
    e.parts.push_back({"master weights and summed gradients (fp32)", 2 * params * fp32});
    e.parts.push_back({"AdamW moments (fp32)", 2 * params * fp32});
  }
  const double layers = static_cast<double>(p.layers);
  if (t.activation_checkpointing)
    e.parts.push_back({"activations of a micro-batch (layer inputs, one layer recomputed)",
                       tokens * (layers * static_cast<double>(p.hidden) + per_token_layer) * bf16});
  else
    e.parts.push_back({"activations of a micro-batch", tokens * layers * per_token_layer * bf16});
  // The log-probs are taken a chunk of rows at a time (trainer/grpo_step.hpp token_logprobs): the
  // logits and their gradient are whole, the fp32 softmax only a chunk's. (When a whole fp32
  // log-softmax and its gradient were kept, a 7B-shaped LoRA + checkpointing step of 4 x 4096
  // tokens peaked at 52.4 GiB on an H200, 2026-12-06, where this plan then said 49.6.)
  e.parts.push_back({"logits and their gradient (bf16)", 2 * tokens * static_cast<double>(p.vocab) * bf16});
  return sorted(std::move(e));
}

memory_verdict judge_memory(const memory_estimate& sampler, const memory_estimate& trainer, bool shared,
                            double gpu_bytes, double margin, const memory_estimate& sandbox) {
  memory_verdict v;
  std::ostringstream s;
  s << line(sampler) << "\n" << line(trainer) << "\n";
  const bool with_sandbox = !sandbox.parts.empty();
  if (with_sandbox) s << line(sandbox) << " (on the sampler's GPU)\n";
  if (gpu_bytes <= 0) {
    s << "GPU memory unknown here: not checked against it";
    v.text = s.str();
    return v;
  }
  const double room = gpu_bytes * (1 - margin);
  auto check = [&](const std::string& who, double need) {
    if (need <= room) return;
    v.fits = false;
    s << who << " needs " << gib(need) << ", more than " << gib(room) << " (the GPU's " << gib(gpu_bytes)
      << " less a " << static_cast<int>(margin * 100) << " % margin)\n";
  };
  const std::string and_sandbox = with_sandbox ? " and the sandbox's children" : "";
  if (shared) {
    check("the sampler" + std::string(with_sandbox ? ", the trainer" : " and trainer") + and_sandbox + " on one GPU",
          sampler.total() + trainer.total() + sandbox.total());
  } else {
    check("the sampler" + and_sandbox, sampler.total() + sandbox.total());
    check("the trainer", trainer.total());
  }
  if (!v.fits)
    s << "lower [trainer] micro_batch, [sampler] max_new_tokens, group_size or batch_requests, "
      << (with_sandbox ? "[sandbox] runners_per_gpu, [agent] max_turns, " : "") << "set [trainer] "
         "lora or activation_checkpointing = true, give the sampler and trainer GPUs of their own, or use "
         "a smaller model, or with several trainer GPUs set [trainer] shard_optimizer = true";
  else
    s << "fits a GPU of " << gib(gpu_bytes) << (shared ? (with_sandbox ? " with all on it" : " with both on it") : "");
  v.text = s.str();
  return v;
}

}  // namespace kforge::pipeline

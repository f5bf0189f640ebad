#pragma once
// The memory a manifest's policy needs on a GPU, estimated before anything loads, for
// `kforge run --check`: the sampler (bf16 weights, the KV cache of a full batch of groups at the
// longest sequence) and the trainer as the manifest builds it: full fine-tuning (a bf16 copy of
// the policy and its gradients, a frozen bf16 reference, fp32 master weights and summed gradients,
// AdamW's two fp32 moments) or LoRA (trainer.lora: the frozen bf16 base, which is also the
// reference, and fp32 adapters with their gradients and moments); with trainer.shard_optimizer
// over N ranks, each rank holds the bf16 weights, reference and gradients whole and 1/N of the fp32
// master weights, summed gradients and moments (trainer/sharded_adamw.hpp); and the activations of
// one micro-batch kept for backward (with trainer.activation_checkpointing: each layer's input,
// plus one layer's activations while it is recomputed), the logits and their gradient included.
// Estimates from the model's shapes (config.json), not measurements; what they leave out (the
// allocator's slack, CUDA's context, workspace) is why a plan must keep a margin.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/result.hpp"
#include "config/options/agent_options.hpp"
#include "config/options/sampler_options.hpp"
#include "config/options/trainer_options.hpp"

namespace kforge::pipeline {

/// The shapes of a decoder-only policy that decide its memory (model/config.hpp's fields).
struct policy_shape {
  std::int64_t hidden = 0, intermediate = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0, vocab = 0;
  bool tied_embeddings = false;
  /// Parameters: embeddings, per layer the attention (q, k, v with their biases, o) and the gated
  /// MLP and two norms, the final norm, and an untied output head.
  std::int64_t parameters() const;
  /// Parameters of LoRA adapters of rank `rank` on the named projections of every layer (A: rank x
  /// in, B: out x rank; names as config/options/trainer_options.hpp's lora_projection_names).
  std::int64_t lora_parameters(std::int64_t rank, const std::vector<std::string>& targets) const;
};

/// A stage's estimate: its parts in bytes, largest first once built.
struct memory_estimate {
  std::string stage;
  std::vector<std::pair<std::string, double>> parts;
  double total() const;
};

/// The sampler's KV cache and logits for its largest batch (planned_sampler_rows), every sequence
/// `sequence_tokens` long (planned_sequence_tokens).
memory_estimate sampler_memory(const policy_shape& p, const sampler_options& s, std::int64_t sequence_tokens,
                               const agent_options& a = {});
/// Bytes on each trainer rank, a micro-batch of sequences `sequence_tokens` long; `ranks`: the
/// data-parallel ranks optimiser state is sharded over with trainer.shard_optimizer (1, or no
/// sharding: every rank holds all of it).
memory_estimate trainer_memory(const policy_shape& p, const trainer_options& t, std::int64_t sequence_tokens,
                               std::int64_t ranks = 1);
/// The candidate children of a sandbox worker on one GPU: runners_per_gpu x planned_child_bytes.
memory_estimate sandbox_memory(int runners_per_gpu);

/// The shapes in `model_dir`'s config.json; an error where it cannot be read, or where this build
/// has no model library to read it with.
result<policy_shape> policy_shape_of(const std::string& model_dir);

/// "12.3 GiB".
std::string gib(double bytes);

/// The estimates side by side with the GPU's memory (0: unknown), and whether they fit: the
/// stages that share one GPU must fit it together with `margin` (a fraction) to spare. `shared`:
/// sampler and trainer on the same GPU.
struct memory_verdict {
  bool fits = true;
  std::string text;  ///< one line per estimate, then what to change when it does not fit
};
/// `sandbox`: the candidate children on the sampler's GPU (sandbox_memory), or none (no parts).
memory_verdict judge_memory(const memory_estimate& sampler, const memory_estimate& trainer, bool shared,
                            double gpu_bytes, double margin = 0.1, const memory_estimate& sandbox = {});

/// The prompt length the plan assumes (a rendered prompt of the embedded template is ~1,500 tokens).
inline constexpr std::int64_t planned_prompt_tokens = 2048;
/// What one candidate child may hold on its GPU: children judging the built-in tasks held up to
/// 7.7 GiB each, and the sandbox's reference processes 3-4 GiB, on an H100 (2026-12-06).
inline constexpr double planned_child_bytes = 10.0 * 1024 * 1024 * 1024;

/// The longest sequence the loop makes: a prompt, and each turn of an episode with the observation
/// before the next (one turn: the prompt and max_new_tokens). agent.max_tokens, when set, stops an
/// episode's turns once its context holds that many tokens, so the last turn starts below it.
std::int64_t planned_sequence_tokens(const sampler_options& s, const agent_options& a = {});
/// The most sequences one generate call of the engine sampler decodes: batch_requests groups of
/// group_size, and with episodes joined with as many turns (sampler.batch_turns_with_groups).
std::int64_t planned_sampler_rows(const sampler_options& s, const agent_options& a = {});

}  // namespace kforge::pipeline

#pragma once
// The sampler's `engine` backend: the policy as an in-process LibTorch model (kforge::model), bf16
// on a GPU, fp32 on the CPU.
//
// generate(): the request's prompt, wrapped in the checkpoint's chat format (model/chat.hpp; raw
// when the tokenizer has no chat template), is sampled group_size times in one batch. Sampling
// settings come from the request (the task generator copies them from the manifest's [sampler]
// table); a value out of range there falls back to these options, and max_new_tokens is capped at
// the options' value. A group's random numbers are seeded from (run seed, the request's sample id),
// so a rerun gives the same candidates. generate_batch() samples the requests waiting together
// (up to [sampler] batch_requests; those with equal sampling settings in one model::generate call),
// each still with its own seed, so batching changes no candidate. Generation stops at the
// checkpoint's eos tokens
// (generation_config.json, tokenizer_config.json, else config.json).
// Each candidate carries the completion's text (special tokens skipped, a final eos not included),
// its tokens (the eos included) with their behaviour log-probs (model/generate.hpp: under the
// sampling temperature, before top-p truncation — what the trainer's scoring pass computes), the
// prompt's tokens as fed to the model (chat wrapping included), and the kernel source taken out of
// the completion (candidate_source).
//
// set_weights(): `file` (a safetensors file at `path`, e.g. written by model::save_weights or the
// trainer's checkpoint: Hugging Face tensor names, every parameter of the model, any float dtype)
// or `inline_bytes` (the same file's bytes in `data`). `bytes`, when not 0, must equal the file's
// size. Everything is checked before any weight is copied, so a bad file leaves the old weights
// serving. `nccl` (trainer.publish, config/weights_publish.hpp): the sampler is a rank of the
// trainer's weights group; weights_arrived() (the pump, at once) starts receiving the version into a
// staging buffer while this sampler generates, and set_weights() (between batches) waits for it and
// copies it into the model. Only in builds with CUDA.
//
// This header is torch-free; engine_sampler.cpp is the only pipeline TU that includes LibTorch.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "actors/logic_interfaces.hpp"
#include "common/result.hpp"
#include "config/options/agent_options.hpp"
#include "config/options/sampler_options.hpp"

namespace kforge::pipeline {

struct manifest;

struct engine_sampler_options {
  /// The manifest's [sampler] table: `model` is the checkpoint directory (config.json,
  /// safetensors, tokenizer files); the sampling settings are the fallbacks described above.
  sampler_options sampler;
  /// Directory of tokenizer.json and tokenizer_config.json; empty: the model directory.
  std::string tokenizer_dir;
  /// CUDA device ordinal (bf16), or -1 for the CPU (fp32).
  int device = -1;
  /// The run's seed; with each request's sample id it seeds that group's sampling.
  std::uint64_t seed = 0;
  /// > 0: this sampler's rank in the trainer's NCCL weights group; 0: weights come by file.
  int publish_rank = 0;
  /// How long a version may take to arrive (trainer.publish_timeout_s).
  std::chrono::milliseconds publish_timeout{std::chrono::minutes(10)};
  /// The manifest's [agent] table: with max_turns > 1 the sampler also generates episodes' later
  /// turns (stages/episode_turn_sampler.hpp).
  agent_options agent;
};

/// The engine's policy used directly, outside the stage actors: an agent episode's turns
/// (agent/episode.hpp) continue token ids rather than a prompt's text. Torch-free interface.
class engine_policy {
 public:
  virtual ~engine_policy() = default;
  /// A prompt's ids exactly as the sampler feeds them (the checkpoint's chat wrapping included).
  virtual std::vector<std::int32_t> prompt_ids(std::string_view prompt) const = 0;
  /// The ids of a message that follows the model's turn `previous` (its completion tokens): the
  /// turn closed where it did not stop on its end token, the message as a user turn, and the
  /// assistant's next turn opened (model::chat_format::follow_up).
  virtual std::vector<std::int32_t> follow_up_ids(std::string_view message,
                                                  const std::vector<std::int32_t>& previous) const = 0;
  /// Text of ids, special tokens included (for transcripts).
  virtual std::string decode(const std::vector<std::int32_t>& ids) const = 0;

  struct continuation {
    std::vector<std::int32_t> tokens;  ///< new tokens, a final stop token included
    std::vector<float> logprobs;       ///< the behaviour policy's, one per token
    std::string text;                  ///< decoded, special tokens and the final stop token left out
  };
  /// One sampled continuation of each of `contexts`, context k drawing from a generator seeded
  /// seeds[k] (so a context's continuation does not depend on what shares the batch).
  virtual result<std::vector<continuation>> continue_each(const std::vector<std::vector<std::int32_t>>& contexts,
                                                          const std::vector<std::uint64_t>& seeds,
                                                          double temperature, double top_p,
                                                          int max_new_tokens) = 0;
  /// `n` continuations of one context drawing from one generator seeded `seed`: what the sampler's
  /// generate() does for a group, so that a server answering through this (`kforge serve`) gives
  /// exactly the in-process engine's candidates. Default: not offered.
  virtual result<std::vector<continuation>> sample_group(const std::vector<std::int32_t>& context, int n,
                                                         std::uint64_t seed, double temperature, double top_p,
                                                         int max_new_tokens) {
    (void)context, (void)n, (void)seed, (void)temperature, (void)top_p, (void)max_new_tokens;
    return error{"this policy samples no groups"};
  }
  /// One group of `n` continuations of each of `contexts` in one batch, context k's group drawing
  /// from a generator seeded seeds[k]: groups[k] is what sample_group(contexts[k], n, seeds[k], ...)
  /// gives alone (up to the rounding of batched arithmetic), so a server can batch requests that
  /// arrive together without changing any request's samples (`kforge serve`). Default: one
  /// sample_group call per context.
  virtual result<std::vector<std::vector<continuation>>> sample_groups(
      const std::vector<std::vector<std::int32_t>>& contexts, int n, const std::vector<std::uint64_t>& seeds,
      double temperature, double top_p, int max_new_tokens) {
    if (contexts.size() != seeds.size()) return error{"engine policy: one seed per context"};
    std::vector<std::vector<continuation>> groups;
    for (std::size_t k = 0; k < contexts.size(); ++k) {
      auto g = sample_group(contexts[k], n, seeds[k], temperature, top_p, max_new_tokens);
      if (!g) return g.err();
      groups.push_back(std::move(*g));
    }
    return groups;
  }
  /// Device memory the policy holds only as cache (what generation freed) handed back, for another
  /// process on its GPU (`kforge optimize`'s candidate children). Default: a policy that caches none.
  virtual void release_cached_memory() {}
  /// New weights from a safetensors file, as set_weights' `file` transport; a bad file leaves the
  /// old weights serving. Default: a policy whose weights cannot change.
  virtual status load_weights_file(const std::string& path) {
    return error{"this policy cannot load weights (" + path + ")"};
  }
  /// The LoRA adapter of the PEFT directory `dir` (adapter_config.json + adapter_model.safetensors,
  /// model/lora.hpp) applied to the model unmerged, on for the generations that follow. A later
  /// call replaces the adapter: its tensors are copied in where its rank, alpha and target
  /// projections equal the loaded one's, else the old adapter is taken off and the new one put on.
  /// Everything is checked before the model changes, so a bad directory leaves what was serving
  /// (the old adapter, or none). As load_weights_file: not while a generation runs (the caller
  /// holds its model lock). Default: a policy that offers no adapters.
  virtual status load_adapter(const std::string& dir) {
    return error{"this policy does not offer LoRA adapters (" + dir + ")"};
  }
  /// The base model again: the adapter taken off (not merged) for the generations that follow. Not
  /// while a generation runs. Default: a policy that offers no adapters.
  virtual status unload_adapter() { return error{"this policy does not offer LoRA adapters"}; }
  /// Whether an adapter is loaded and on.
  virtual bool adapter_on() const { return false; }
  /// Switches a loaded adapter off (the base model, model::lora_disabled) or on again, its tensors
  /// kept: a server holding an adapter answers requests for the base model between those for the
  /// adapter. A no-op without an adapter. Not while a generation runs.
  virtual void switch_adapter(bool on) { (void)on; }
};

/// Switches `p`'s adapter off for its lifetime (and back on after, where it was on): a generation
/// of the base model while an adapter is loaded.
class base_model_only {
 public:
  explicit base_model_only(engine_policy& p) : p_(p), was_on_(p.adapter_on()) {
    if (was_on_) p_.switch_adapter(false);
  }
  ~base_model_only() {
    if (was_on_) p_.switch_adapter(true);
  }
  base_model_only(const base_model_only&) = delete;
  base_model_only& operator=(const base_model_only&) = delete;

 private:
  engine_policy& p_;
  bool was_on_;
};

/// The checkpoint and tokenizer of `o` as an engine_policy (o.publish_rank is not used).
[[nodiscard]] result<std::shared_ptr<engine_policy>> load_engine_policy(const engine_sampler_options& o);

/// Loads the checkpoint and tokenizer. Errors name the directory or file and what is wrong.
[[nodiscard]] result<std::shared_ptr<actors::sampler_logic>> make_engine_sampler(const engine_sampler_options& o);

/// The options for a manifest: [sampler], run.seed, and the device: the first GPU of the sampler's
/// gpu_group (stage_gpus, as for every stage); no group or an empty one means the CPU. A group that
/// cannot be resolved here is an error; a GPU LibTorch cannot see is make_engine_sampler's error.
/// With weights by NCCL, `process` (the hosting process's name) gives the sampler's rank.
[[nodiscard]] result<engine_sampler_options> engine_sampler_options_from(const manifest& m,
                                                                         const std::string& process);

/// The kernel source in a completion: the block tasks::extract_kernel_source picks (the last ```cuda,
/// ```cu, ```cpp, ```c++, ```c or bare ``` block that mentions kf_forward, the rule the prompt
/// template states); when it finds none (no block, no block with kf_forward, a block never closed)
/// the whole completion. The sandbox_worker stage's nvcc backend rejects such a source with the
/// reason where it opened a fence (tasks::fenced_answer_problem, stages/sandbox_stage.cpp) and
/// compiles it where it has none (bare code); `kforge eval` compiles every source as before.
std::string candidate_source(std::string_view completion);

/// The sampling seed of the group answering request `sample_id` in a run seeded `run_seed`.
std::uint64_t group_seed(std::uint64_t run_seed, std::uint64_t sample_id) noexcept;

}  // namespace kforge::pipeline

#pragma once
// Sampling and scoring with the LibTorch model.
//
// generate(): prompts x n samples in one batch (left-padded, one KV cache), temperature / top-k /
// top-p sampling or greedy, stop tokens, a logits-processor hook. It returns, for every sample, the
// new tokens, their text and the log-prob of each sampled token under the sampling temperature:
// log_softmax(processed_logits / temperature) (temperature 0 = greedy, log-probs at temperature 1),
// before top-k/top-p truncation — the quantity the trainer's ratio needs, and what score() computes.
// Samples that stop leave the batch (their cache rows too) as others go on; each row draws its own
// uniforms every step, so a sample depends on the seed, its prompt and its index only. On a GPU the
// decoding loop does not wait for the device between steps (the uniforms are moved once, tokens
// and log-probs stay there until the end; with stop tokens the host checks them every 8 steps).
//
// score(): the same log-probs for given (prompt, completion) pairs with gradients, in micro-batches,
// for training.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/result.hpp"
#include "model/prefill_scratch.hpp"
#include "model/tokenizer.hpp"
#include "model/transformer.hpp"

namespace kforge::model {

/// Called every step on the next-token logits [rows, V] (fp32, modifiable in place, e.g. set to
/// -inf to forbid tokens), with the tokens generated so far [rows, step], which original row each
/// batch row is ([rows] int64, prompt-major: prompt = row / n, sample = row % n, or by the running
/// sum of prompt_n where given; rows that stopped leave the batch) and the step index.
using logits_processor = std::function<void(at::Tensor& logits, const at::Tensor& generated,
                                            const at::Tensor& rows, std::int64_t step)>;

struct sampling_options {
  /// Samples per prompt (a GRPO group).
  std::int64_t n = 1;
  /// One count per prompt instead of `n` (each >= 1; empty: n for every prompt), so that groups
  /// and single continuations share one batch. Prompt p's samples are the ones a call with that
  /// prompt alone and n = prompt_n[p] gives (with prompt_seeds; up to batched rounding).
  std::vector<std::int64_t> prompt_n;
  /// Softmax temperature; 0 picks the arg max (greedy).
  double temperature = 1.0;
  /// Nucleus sampling: keep the smallest set of tokens whose probability reaches top_p (1 = off).
  double top_p = 1.0;
  /// Keep the k most likely tokens (0 = off).
  std::int64_t top_k = 0;
  /// New tokens per sample, at most.
  std::int64_t max_new_tokens = 256;
  /// A sample ends after producing one of these (the stop token is returned with its log-prob).
  std::vector<std::int64_t> stop_tokens;
  /// Seed of the sampler's random numbers (drawn on the CPU: the same on every device).
  std::uint64_t seed = 0;
  /// One seed per prompt instead of `seed`: prompt p's n rows then draw from a generator seeded
  /// prompt_seeds[p], so they are the samples a call with that prompt alone and seed =
  /// prompt_seeds[p] gives, whatever else shares the batch (up to the rounding of batched
  /// arithmetic). This lets a sampler batch many requests and keep each request's samples.
  std::vector<std::uint64_t> prompt_seeds;
  /// Token placed in padding positions (never attended to).
  std::int64_t pad_token = 0;
  /// Text is decoded without special tokens when true.
  bool skip_special_tokens = true;
  /// Optional hook on the logits before temperature, top-k and top-p.
  logits_processor processor;
  /// With stop tokens: steps between the host's checks for stopped rows (each check waits for the
  /// device). 0: every step on the CPU, every 8 on a GPU. Results do not depend on it; a stopped
  /// row costs up to this many wasted steps before it leaves the batch.
  std::int64_t check_stops_every = 0;
  /// Optional: called with true before generation puts work on the device and with false once
  /// the host has waited for that work, around the prefill and each window of steps between the
  /// host's checks for stopped rows. A caller holds a host-wide shared GPU lock in between
  /// (common/gpu_use_lock.hpp), so a sandbox's exclusive timed trial on the same GPU never
  /// overlaps generation. Calls alternate, starting with true and ending with false.
  std::function<void(bool in_use)> device_use;
  /// The prompts are prefilled in slices of their positions so that a forward's attention scratch
  /// (masks and scores over prompts x slice x prompt length, attention_bytes_per_pair each) stays
  /// under this many bytes; one forward when it fits. At least one position a slice.
  double prefill_scratch_bytes = default_prefill_scratch_bytes;
};

struct generation {
  std::size_t prompt = 0;            ///< index into the prompts
  std::size_t sample = 0;            ///< 0 .. n-1 (prompt_n[prompt] - 1)
  std::vector<std::int64_t> tokens;  ///< new tokens, the stop token included when one ended it
  std::vector<float> logprobs;       ///< one per token
  std::string text;                  ///< decoded tokens (without a final stop token); empty without a tokenizer
  bool stopped = false;              ///< ended by a stop token rather than max_new_tokens
};

/// prompts.size() * n generations (the sum of prompt_n where given), prompt-major (prompt 0's
/// samples first). Runs under no-grad on the model's device and dtype. Errors: empty prompt list or
/// prompt, bad options, tokens outside the vocabulary.
[[nodiscard]] result<std::vector<generation>> generate(CausalLMImpl& model,
                                                       const std::vector<std::vector<std::int64_t>>& prompts,
                                                       const sampling_options& options,
                                                       const tokenizer* tok = nullptr);

struct score_item {
  std::vector<std::int64_t> prompt;      ///< at least one token
  std::vector<std::int64_t> completion;  ///< the tokens whose log-probs are wanted
};

struct score_options {
  /// The temperature the completions were sampled at (0 is read as 1, as in generate()).
  double temperature = 1.0;
  /// Sequences per forward pass.
  std::int64_t micro_batch = 8;
  std::int64_t pad_token = 0;
};

/// One micro-batch's log-probs: logprobs [b, C] (fp32, with the graph when grad mode is on) and
/// mask [b, C] (1 where the item has a completion token), C = the longest completion.
struct scored_batch {
  at::Tensor logprobs;
  at::Tensor mask;
};

/// Log-probs of every completion token, one micro-batch at a time: `fn(first, batch)` gets the
/// micro-batch of items [first, first + b) and typically computes a loss and calls backward(),
/// so that only one micro-batch's activations are alive at once.
[[nodiscard]] status score(CausalLMImpl& model, const std::vector<score_item>& items, const score_options& options,
                           const std::function<void(std::size_t first, const scored_batch& batch)>& fn);

/// All items as one batch (no micro-batching).
[[nodiscard]] result<scored_batch> score_batch(CausalLMImpl& model, const std::vector<score_item>& items,
                                               const score_options& options);

}  // namespace kforge::model

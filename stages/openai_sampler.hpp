#pragma once
// The sampler's `openai` backend: the policy served by OpenAI-compatible inference servers (vLLM,
// SGLang, `kforge serve`), reached over HTTP through stages/openai_client.hpp.
//
// generate(): the request's prompt is wrapped and tokenized here with the checkpoint's tokenizer
// and chat format ([sampler] model names the directory of its tokenizer files), exactly as the
// engine backend does, and sent as token ids with n = group size and seed = the group's seed
// (group_seed), so the candidates carry the prompt ids the trainer scores and the sampled ids with
// their behaviour log-probs as the server reports them. Sampling settings fall back to [sampler]
// as the engine's do. generate_batch() sends every request of the batch at once, each to the
// least-loaded live replica. A request no replica answers is that request's error, never dropped.
//
// set_weights(): the `file` transport only: the path goes to every replica's
// /update_weights_from_disk, and the sampler reports the new version only when all confirm.
//
// Episodes of [agent] max_turns > 1: later turns go through episode_turn_sampler with this sampler
// as its engine_policy (continue_each sends one request per context, n = 1, its own seed).
//
// Torch-free; it sits in the LibTorch stages' library because it shares the engine sampler's
// group_seed, candidate_source and episode_turn_sampler.

#include <memory>
#include <string>
#include <vector>

#include "actors/logic_interfaces.hpp"
#include "common/result.hpp"
#include "stages/engine_sampler.hpp"
#include "stages/inference_servers.hpp"
#include "stages/openai_client.hpp"

namespace kforge::pipeline {

struct manifest;

struct openai_sampler_options {
  /// [sampler]: the sampling fallbacks, `model` (the tokenizer files), batch_requests.
  sampler_options sampler;
  /// The replicas' base URLs (server_url, then server_urls).
  std::vector<std::string> urls;
  /// Directory of tokenizer.json and tokenizer_config.json; empty: sampler.model.
  std::string tokenizer_dir;
  std::uint64_t seed = 0;
  agent_options agent;
  replica_pool_options pool;
  /// With [sampler.server]: the sampler's GPU ordinals (a server each) and where the servers' logs go.
  std::vector<int> server_gpus;
  std::string server_log_dir = "logs";
};

/// The options of a manifest's [sampler], [agent] and run.seed.
openai_sampler_options openai_sampler_options_from(const manifest& m);

/// Loads the tokenizer, starts the [sampler.server] servers (stopped when the sampler goes) and
/// reaches the servers: every replica must answer /health, and the first names the model id sent
/// with each request. Errors say which URL, file or started server failed.
[[nodiscard]] result<std::shared_ptr<actors::sampler_logic>> make_openai_sampler(const openai_sampler_options& o);

/// The same sampler as an engine_policy too (tests, episodes): both pointers own one object.
struct openai_sampler_handles {
  std::shared_ptr<actors::sampler_logic> sampler;
  std::shared_ptr<engine_policy> policy;
  std::shared_ptr<replica_pool> pool;
  std::shared_ptr<inference_servers> servers;  ///< those [sampler.server] started; null without it
};
[[nodiscard]] result<openai_sampler_handles> make_openai_sampler_handles(const openai_sampler_options& o);

}  // namespace kforge::pipeline

#pragma once
// Settings of the sampler stage, from the manifest's [sampler] table. Header-only and free of other
// kforge headers so the sampler can include it without depending on the manifest.

#include <cstdint>
#include <string>
#include <vector>

namespace kforge {

/// Where the policy runs.
/// How inference servers load LoRA adapters while they run, and how a request names one:
///   sglang: POST /load_lora_adapter and /unload_lora_adapter; a request names it in "lora_path";
///   vllm:   POST /v1/load_lora_adapter and /v1/unload_lora_adapter (the server started with
///           VLLM_ALLOW_RUNTIME_LORA_UPDATING=True and --enable-lora); a request names it as "model".
/// Both take {"lora_name": NAME, "lora_path": DIR} (and unload {"lora_name": NAME}); `kforge serve`
/// answers both.
enum class server_adapter_api { sglang, vllm };

enum class sampler_backend {
  engine,  ///< in-process LibTorch model
  openai,  ///< OpenAI-compatible servers (vLLM, SGLang, `kforge serve`) at server_url(s)
};

/// Upper bounds of the counts below, for the manifest and `kforge sample`'s flags alike. Far above
/// any real setting; a larger value is a typo that would abort on allocation (the group, the batch
/// and the KV cache grow with them) instead of failing as bad input.
inline constexpr int max_group_size = 1024;
inline constexpr int max_new_tokens_limit = 1 << 17;
inline constexpr int max_batch_requests = 1024;

/// [sampler.server]: inference servers the openai backend starts itself and stops at the end.
struct sampler_server {
  bool enabled = false;  ///< the table is present
  /// A shell command line (run by /bin/sh) starting one server; {port} becomes its port and {gpu}
  /// its GPU ordinal (also set as CUDA_VISIBLE_DEVICES), "" without one.
  std::string command;
  /// Port of the first server; server k listens on port + k. In [1, 65535].
  int port = 8100;
  /// Servers to start: 0 means one per GPU of the sampler's group, or one where it has none.
  int count = 0;
  /// Seconds each server has to answer GET /health after it starts (loading a 32B model takes
  /// minutes). > 0.
  double ready_timeout_s = 900;
};

struct sampler_options {
  /// engine or openai (see sampler_backend).
  sampler_backend backend = sampler_backend::engine;
  /// Candidates per prompt: the GRPO group G. >= 2, since advantages are normalised in the group.
  /// At most max_group_size.
  int group_size = 8;
  /// Sampling temperature. > 0 (greedy decoding would make every group member identical).
  double temperature = 0.8;
  /// Nucleus sampling mass. In (0, 1]; 1 disables it.
  double top_p = 1.0;
  /// Generation budget per candidate, in tokens. In [1, max_new_tokens_limit].
  int max_new_tokens = 2048;
  /// Engine: requests (GRPO groups) generated together in one batch, at most. The requests waiting
  /// when the sampler is free are batched: with 8 groups of 8 a GPU decodes 64 rows at once rather
  /// than 8 at a time. Bounded because the KV cache grows with it. In [1, max_batch_requests]
  /// (1: one group at a time).
  int batch_requests = 8;
  /// Engine, episodes ([agent] max_turns > 1): new groups and episodes' next turns waiting at the
  /// same time are decoded in one batch rather than one call after the other. A small model's
  /// call takes as long as its longest sequence whatever its rows, so this about halves the
  /// sampler's time for both (kforge-tiny on an H100: 0.51x, 2026-12-07); the batch's KV cache then holds every row at the longest context
  /// (twice the rows of either call: runtime/memory_plan.hpp counts them). Each prompt keeps its
  /// seed: the candidates are those of separate calls up to the rounding of batched arithmetic.
  bool batch_turns_with_groups = true;
  /// Model: a directory for the engine backend, a model name for the openai backend. Empty: the
  /// stand-in sampler and trainer (synthetic candidates; nothing trained), as the run's banner says.
  std::string model;
  /// Base URL of the server for the openai backend (e.g. http://127.0.0.1:8000/v1). The openai
  /// backend needs it or server_urls.
  std::string server_url;
  /// More servers for the openai backend: data-parallel replicas of one model, sharing the requests
  /// by load (after server_url when both are given).
  std::vector<std::string> server_urls;
  /// Engine: refuse to start where the sampler's GPU group has no GPU, rather than sample on the
  /// CPU. A real model writing kernels of thousands of tokens takes hours a step there.
  bool require_gpu = false;
  /// Stand-in sampler only: every this-many-th group's candidates share one kernel, as a collapsed
  /// policy's would, so the buffer drops the repeats and then the group. 0: off. >= 0.
  int stand_in_repeat_every = 0;
  /// openai backend: servers started by the sampler's process (their URLs come after server_url
  /// and server_urls).
  sampler_server server;
  /// openai backend with trainer.publish = "adapters": the servers' adapter endpoints and how a
  /// request names an adapter (stages/openai_client.hpp adapter_api).
  server_adapter_api adapter_api = server_adapter_api::sglang;
};

}  // namespace kforge

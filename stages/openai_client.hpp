#pragma once
// Talking to OpenAI-compatible inference servers (vLLM, SGLang, `kforge serve`) token-in,
// token-out, for the sampler's `openai` backend.
//
// A request is POST /v1/completions with the prompt as a list of token ids, `n`, `temperature`,
// `top_p`, `max_tokens`, `seed`, and the options vLLM documents for getting tokens back:
// `logprobs: 1` (the sampled token's log-prob, in `logprobs.token_logprobs`),
// `return_tokens_as_token_ids: true` (`logprobs.tokens` as "token_id:N") and `return_token_ids: true`
// (each choice's `token_ids`). A choice's ids come from `token_ids` where the server gives them,
// else from `logprobs.tokens`; a response with only text is refused, naming the option missing.
//
// Several replicas (data-parallel servers) share the requests: each goes to the healthy replica with
// the fewest requests in flight. A request that fails on a replica (no connection, a timeout, a 5xx
// status, a cut or unreadable body) is retried on another after a backoff; a replica that fails
// `drop_after` times in a row is dropped for the rest of the run, and said so on stderr. A 4xx answer
// is the request's own fault and is not retried. Whatever happens, each call returns a result.
// Thread-safe: generate_batch calls complete() from many threads at once.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/result.hpp"
#include "config/options/sampler_options.hpp"

namespace kforge::pipeline {

struct completion_request {
  std::vector<std::int32_t> prompt;
  int n = 1;
  double temperature = 1.0;
  double top_p = 1.0;
  int max_tokens = 16;
  std::optional<std::uint64_t> seed;
};

struct completion_choice {
  std::vector<std::int32_t> tokens;  ///< sampled ids, a final stop token included
  std::vector<float> logprobs;       ///< one per token
  std::string text;
  std::string finish_reason;
};

/// How a server loads LoRA adapters and how a request names one (config/options/sampler_options.hpp).
using adapter_api = server_adapter_api;

/// The adapter requests are sent to: its name and how they name it (name empty: none).
struct adapter_in_use {
  std::string name;
  adapter_api api = adapter_api::sglang;
};

/// The JSON body of `r` for model `model` (left out when empty), naming `adapter` where one is in use.
std::string completion_body(const completion_request& r, const std::string& model, const adapter_in_use& adapter = {});

/// The `n` choices of a /v1/completions response body, in index order. Errors say what is wrong
/// with the body (not JSON, cut short, a choice without ids or log-probs and the option that asks
/// for them).
[[nodiscard]] result<std::vector<completion_choice>> parse_completion(const std::string& body, int n);

/// The message of an OpenAI-style error body ({"error": {"message": ...}}), else the body itself,
/// cut to a readable length.
std::string error_message_of(const std::string& body);

struct replica_pool_options {
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(5)};
  /// A generation of thousands of tokens on a loaded server takes minutes.
  std::chrono::milliseconds read_timeout{std::chrono::minutes(30)};
  /// Tries of one request over all replicas, the first included.
  int attempts = 6;
  /// The wait before the second try; doubled for each further one, up to max_backoff.
  std::chrono::milliseconds backoff{std::chrono::milliseconds(200)};
  std::chrono::milliseconds max_backoff{std::chrono::seconds(5)};
  /// Failures in a row after which a replica is dropped for good.
  int drop_after = 3;
};

class replica_pool {
 public:
  /// `urls`: base URLs (http://host:port, with or without a path such as /v1). Errors name a URL
  /// that cannot be read.
  [[nodiscard]] static result<std::shared_ptr<replica_pool>> make(const std::vector<std::string>& urls,
                                                                  replica_pool_options o = {});
  ~replica_pool();

  /// The choices of one request, from whichever replica answers it. `what` starts error messages.
  result<std::vector<completion_choice>> complete(const completion_request& r, const std::string& what);

  /// POST /update_weights_from_disk {"model_path": path, "weight_version": version} to every replica
  /// not dropped; success only when all of them confirm. A replica that cannot be reached counts as
  /// failing (its weights would be stale), so is one that answers success false.
  status update_weights(const std::string& path, std::uint64_t version);

  /// Loads the PEFT adapter in `dir` under `name` on every replica not dropped (`api`'s endpoint),
  /// with the same all-or-drop rule as update_weights; later requests name it. The adapter used
  /// before is then unloaded (a failure there is only said on stderr: the new one is in use).
  status load_adapter(const std::string& name, const std::string& dir, std::uint64_t version, adapter_api api);

  /// GET /health of every replica not dropped; the message of the first that fails.
  status check_health();

  /// The model id to send: the first id of the first replica's /v1/models ("" when it lists none).
  result<std::string> served_model();

  /// Base URLs of the replicas not dropped.
  std::vector<std::string> live() const;
  /// Requests each replica answered (for tests and the log).
  std::vector<std::uint64_t> answered() const;

  struct replica;  // defined in the .cpp

 private:
  explicit replica_pool(replica_pool_options o);
  replica* pick(const std::vector<replica*>& tried);
  /// A failure of a request sent at `sent`: counted (rest, and drop after drop_after in a row,
  /// never the last live replica) unless a failure was counted while it was in flight.
  void failed(replica& r, const std::string& why, std::chrono::steady_clock::time_point sent);

  replica_pool_options o_;
  std::vector<std::unique_ptr<replica>> replicas_;
  mutable std::mutex m_;
  /// POST `path` `body` to every replica not dropped, at once; `what` names it in messages. A load
  /// (`load`: weights or an adapter): replicas that fail are dropped when some succeed (they would
  /// serve older weights under the new version), an error when none does. Otherwise (an unload):
  /// any failure is the error, and no replica is dropped for it.
  status post_to_every_replica(const std::string& path, const std::string& body, const std::string& what,
                               bool load = true);

  std::string model_;  ///< from served_model(), sent with every request
  adapter_in_use adapter_;  ///< the adapter sent with every request (name empty: none)
};

}  // namespace kforge::pipeline

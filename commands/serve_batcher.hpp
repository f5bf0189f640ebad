#pragma once
// The queue that lets `kforge serve` generate concurrent requests together.
//
// Why: the openai sampler backend sends one request per GRPO group (n = group size), many in
// flight. Answered one at a time, the model decodes n sequences per step where the in-process
// engine sampler decodes batch_requests x n; on a GPU the step costs about the same either way, so
// the HTTP path would run at a fraction of the engine's tokens/s. Here the server's handler threads
// enqueue their request and wait; one worker thread takes the waiting requests whose sampling
// settings (batch_key) equal the oldest one's, up to max_sequences sequences, and runs them as ONE
// engine_policy::sample_groups call with each request's own seed, so each request gets exactly the
// samples it would get alone.
//
// A burst of requests (the sampler sends a batch at once) reaches the server over some
// milliseconds: the worker waits until none has arrived for `gather` (at most gather_limit in all)
// before it starts, so the first request of a burst does not run alone while the rest wait for it.
// Generation holds `model` (the server's model mutex), so a weight update or an adapter load never
// lands mid-batch, and a batch is all on the base model or all on the adapter.
// Torch-free: the engine is reached through engine_policy.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/result.hpp"
#include "stages/engine_sampler.hpp"

namespace kforge::pipeline {

/// The sampling settings and the model a batch shares: requests generate together only when all
/// are equal.
struct batch_key {
  int n = 1;
  double temperature = 1.0;
  double top_p = 1.0;
  int max_tokens = 16;
  /// The model a request runs on: what the server serves (its LoRA adapter where one is loaded),
  /// the base model (a loaded adapter switched off for the batch, base_model_only), or the adapter
  /// named `adapter`, which must still be the loaded one when the batch runs.
  enum class model_use { served, base, adapter } use = model_use::served;
  std::string adapter;
};
bool operator==(const batch_key& a, const batch_key& b);

/// What the batcher has done so far (GET /v1/models shows it), to see that batching happens.
struct batch_counts {
  std::uint64_t generations = 0;  ///< engine calls run
  std::uint64_t requests = 0;     ///< requests answered by them
  std::uint64_t sequences = 0;    ///< sequences decoded (n per request)
  std::uint64_t largest = 0;      ///< the most requests one call answered
};

struct batcher_options {
  /// Sequences (requests x n) one engine call decodes at most; a request asking for more runs alone.
  std::size_t max_sequences = 64;
  /// Quiet time after the last arrival before a batch starts, and the longest gathering in all.
  std::chrono::milliseconds gather{20};
  std::chrono::milliseconds gather_limit{200};
};

class serve_batcher {
 public:
  using group = std::vector<engine_policy::continuation>;

  serve_batcher(std::shared_ptr<engine_policy> policy, std::mutex& model, batcher_options o);
  ~serve_batcher();
  serve_batcher(const serve_batcher&) = delete;
  serve_batcher& operator=(const serve_batcher&) = delete;

  /// The request's n samples; blocks until its batch has run. Errors: the engine's, or the server
  /// stopping before the request ran.
  result<group> generate(std::vector<std::int32_t> prompt, std::uint64_t seed, const batch_key& key);

  /// Refuses new requests and fails those still queued; a batch already running finishes.
  void stop();

  /// The LoRA adapter the policy now holds (empty: none), for requests that name one. Call with
  /// the model mutex held, right after the policy's adapter changed.
  void adapter_changed(std::string name) { adapter_ = std::move(name); }

  batch_counts counts() const;

 private:
  struct pending {
    std::vector<std::int32_t> prompt;
    std::uint64_t seed = 0;
    batch_key key;
    std::promise<result<group>> done;
  };

  void work();
  std::vector<pending> take(std::unique_lock<std::mutex>& lock);
  void gather(std::unique_lock<std::mutex>& lock);
  void run(std::vector<pending>& batch);
  result<std::vector<group>> generate_all(const std::vector<pending>& batch);

  std::shared_ptr<engine_policy> policy_;
  std::mutex& model_;
  std::string adapter_;  ///< the loaded adapter's name; guarded by model_
  batcher_options o_;
  mutable std::mutex m_;  ///< the queue, the counts, stopping_
  std::condition_variable arrived_;
  std::deque<pending> queue_;
  std::chrono::steady_clock::time_point last_arrival_;
  batch_counts counts_;
  bool stopping_ = false;
  std::thread worker_;  ///< last: started once everything above exists
};

}  // namespace kforge::pipeline

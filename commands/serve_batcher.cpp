#include "commands/serve_batcher.hpp"

#include <algorithm>

namespace kforge::pipeline {

bool operator==(const batch_key& a, const batch_key& b) {
  return a.n == b.n && a.temperature == b.temperature && a.top_p == b.top_p && a.max_tokens == b.max_tokens &&
         a.use == b.use && a.adapter == b.adapter;
}

namespace {

batcher_options with_one_sequence_at_least(batcher_options o) {
  o.max_sequences = std::max<std::size_t>(1, o.max_sequences);
  return o;
}

}  // namespace

serve_batcher::serve_batcher(std::shared_ptr<engine_policy> policy, std::mutex& model, batcher_options o)
    : policy_(std::move(policy)), model_(model), o_(with_one_sequence_at_least(o)), worker_([this] { work(); }) {}

serve_batcher::~serve_batcher() {
  stop();
  worker_.join();
}

result<serve_batcher::group> serve_batcher::generate(std::vector<std::int32_t> prompt, std::uint64_t seed,
                                                     const batch_key& key) {
  std::future<result<group>> answer;
  {
    std::lock_guard lock(m_);
    if (stopping_) return error{"kforge serve is stopping"};
    pending p;
    p.prompt = std::move(prompt);
    p.seed = seed;
    p.key = key;
    answer = p.done.get_future();
    queue_.push_back(std::move(p));
    last_arrival_ = std::chrono::steady_clock::now();
  }
  arrived_.notify_all();
  return answer.get();
}

void serve_batcher::stop() {
  std::deque<pending> dropped;
  {
    std::lock_guard lock(m_);
    stopping_ = true;
    dropped.swap(queue_);
  }
  arrived_.notify_all();
  for (auto& p : dropped) p.done.set_value(error{"kforge serve stopped before this request ran"});
}

batch_counts serve_batcher::counts() const {
  std::lock_guard lock(m_);
  return counts_;
}

void serve_batcher::work() {
  for (;;) {
    std::vector<pending> batch;
    {
      std::unique_lock lock(m_);
      batch = take(lock);
    }
    if (batch.empty()) return;  // stopping
    run(batch);
  }
}

// Waits for a request, lets its burst arrive, then takes the oldest request and those waiting with
// its settings, oldest first, while they fit in max_sequences. Empty: the batcher is stopping.
std::vector<serve_batcher::pending> serve_batcher::take(std::unique_lock<std::mutex>& lock) {
  do {
    arrived_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (!stopping_) gather(lock);
    if (stopping_) return {};  // stop() failed what was queued
  } while (queue_.empty());
  const batch_key key = queue_.front().key;
  std::vector<pending> batch;
  std::deque<pending> rest;
  std::size_t sequences = 0;
  for (auto& p : queue_) {
    const auto n = static_cast<std::size_t>(p.key.n);
    if (p.key == key && (batch.empty() || sequences + n <= o_.max_sequences)) {
      sequences += n;
      batch.push_back(std::move(p));
    } else {
      rest.push_back(std::move(p));
    }
  }
  queue_.swap(rest);
  return batch;
}

// Until no request has arrived for o_.gather (a burst is in), the oldest request's settings fill a
// whole batch, or o_.gather_limit has passed. Requests that waited through a generation start at
// once: their burst arrived long ago.
void serve_batcher::gather(std::unique_lock<std::mutex>& lock) {
  const auto limit = std::chrono::steady_clock::now() + o_.gather_limit;
  while (!stopping_ && !queue_.empty()) {
    std::size_t sequences = 0;
    for (const auto& p : queue_)
      if (p.key == queue_.front().key) sequences += static_cast<std::size_t>(p.key.n);
    const auto until = std::min(last_arrival_ + o_.gather, limit);
    if (sequences >= o_.max_sequences || std::chrono::steady_clock::now() >= until) return;
    arrived_.wait_until(lock, until);
  }
}

void serve_batcher::run(std::vector<pending>& batch) {
  auto groups = generate_all(batch);
  if (groups) {
    for (std::size_t k = 0; k < batch.size(); ++k) batch[k].done.set_value(std::move((*groups)[k]));
    return;
  }
  if (batch.size() == 1) return batch.front().done.set_value(groups.err());
  // One request's trouble (say, a prompt too long for the model) must not fail the others: each
  // alone, so every request gets its own answer.
  for (auto& p : batch) {
    std::vector<pending> one;
    one.push_back(std::move(p));
    run(one);
  }
}

result<std::vector<serve_batcher::group>> serve_batcher::generate_all(const std::vector<pending>& batch) {
  std::vector<std::vector<std::int32_t>> prompts;
  std::vector<std::uint64_t> seeds;
  for (const auto& p : batch) {
    prompts.push_back(p.prompt);
    seeds.push_back(p.seed);
  }
  const batch_key& k = batch.front().key;
  result<std::vector<group>> out = error{"not generated"};
  try {
    std::lock_guard model(model_);
    const auto generate = [&] { return policy_->sample_groups(prompts, k.n, seeds, k.temperature, k.top_p, k.max_tokens); };
    if (k.use == batch_key::model_use::adapter && k.adapter != adapter_) {
      out = error{"the LoRA adapter `" + k.adapter + "` is no longer loaded (unloaded or replaced before this request ran)"};
    } else if (k.use == batch_key::model_use::base) {
      const base_model_only base(*policy_);  // the adapter, if one is on, off for this batch only
      out = generate();
    } else {
      out = generate();
    }
  } catch (const std::exception& e) {
    // LibTorch throws (out of memory on the GPU): the requests' error, not the server's end.
    out = error{std::string("generation failed: ") + e.what()};
  }
  std::lock_guard lock(m_);
  ++counts_.generations;
  if (out) {
    counts_.requests += batch.size();
    counts_.sequences += batch.size() * static_cast<std::size_t>(k.n);
    counts_.largest = std::max<std::uint64_t>(counts_.largest, batch.size());
  }
  return out;
}

}  // namespace kforge::pipeline

#include "stages/engine_sampler.hpp"

#include "agent/episode_turns.hpp"
#include "stages/episode_turn_sampler.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include <torch/cuda.h>

#include "common/gpu_use_lock.hpp"
#include "common/hash.hpp"
#include "common/log.hpp"
#include "common/visible_gpus.hpp"
#include "model/chat.hpp"
#include "model/generate.hpp"
#include "model/lora.hpp"
#include "model/tokenizer.hpp"
#include "model/torch_cache.hpp"
#include "model/weights.hpp"
#include "config/manifest.hpp"
#include "config/weights_publish.hpp"
#include "tasks/prompt.hpp"
#include "trainer/nccl_id.hpp"
#if defined(KFORGE_WITH_CUDA)
#include "trainer/weight_broadcast.hpp"
#endif

namespace kforge::pipeline {

namespace {

int visible_cuda_devices() {
  return torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
}

#if defined(KFORGE_WITH_CUDA)
// What an nccl weights message announces, checked for the fields the receiver needs.
result<trainer::broadcast_info> broadcast_of(const wire::PolicyWeights& w) {
  trainer::broadcast_info b;
  b.version = w.version();
  const auto* id = w.nccl_unique_id();
  if (id == nullptr || id->size() != b.id.bytes.size())
    return error{"transport nccl without a " + std::to_string(b.id.bytes.size()) + "-byte nccl_unique_id"};
  std::memcpy(b.id.bytes.data(), id->data(), id->size());
  b.ranks = w.nccl_ranks();
  b.bytes = w.bytes();
  b.layout_hash = w.checksum();
  b.dtype = w.dtype() ? w.dtype()->str() : "";
  return b;
}
#endif

class engine_sampler final : public actors::sampler_logic, public engine_policy {
 public:
  engine_sampler(engine_sampler_options o, model::CausalLM m, model::tokenizer tok, model::chat_format chat,
                 std::vector<std::int64_t> stops, std::int64_t pad)
      : o_(std::move(o)), model_(std::move(m)), tok_(std::move(tok)), chat_(std::move(chat)),
        stops_(std::move(stops)), pad_(pad) {}

  result<std::vector<wire::CandidateT>> generate(const wire::GenerateRequest& req,
                                                 const actors::envelope_info& info) override {
    auto out = generate_batch({{&req, info}});
    return std::move(out.front());
  }

  // Requests with the same sampling settings share one model::generate call; each keeps its own
  // seed (prompt_seeds), so it gets the candidates it would get alone.
  std::vector<result<std::vector<wire::CandidateT>>> generate_batch(
      const std::vector<request_item>& items) override {
    std::vector<result<std::vector<wire::CandidateT>>> out(items.size(), error{"not generated"});
    const std::vector<prepared> ready = prepare_all(items, out);
    std::vector<const prepared*> all;
    for (const auto& p : ready) all.push_back(&p);
    run_groups(items, all, out);
    return out;
  }

  // New groups and episodes' next turns in one model::generate call ([sampler]
  // batch_turns_with_groups): a group's n rows and one row per turn, each prompt with its own seed,
  // so the candidates are those of separate calls up to batched rounding. Requests at other
  // settings than the turns', and both parts after a failed joint call (memory, say), go the
  // separate ways.
  bool generates_together() const override {
    return turns_ && o_.sampler.batch_turns_with_groups && !joint_off_;
  }

  batch_results generate_together(const std::vector<request_item>& requests,
                                  const std::vector<turn_item>& turns) override {
    if (!generates_together() || requests.empty() || turns.empty())
      return sampler_logic::generate_together(requests, turns);
    batch_results out;
    out.groups.assign(requests.size(), error{"not generated"});
    const std::vector<prepared> ready = prepare_all(requests, out.groups);
    auto pending = turns_->prepare(*this, turns);
    std::vector<const prepared*> joined, apart;
    for (const auto& p : ready) (sampled_as_turns(p.options) ? joined : apart).push_back(&p);
    std::vector<result<continuation>> conts;
    bool joint = false;
    if (!joined.empty() && !pending.contexts.empty()) {
      auto c = generate_rows(requests, joined, pending.contexts, pending.seeds, out.groups);
      if (c) {
        conts = std::move(*c);
        joint = true;
        ++joint_calls_;
      } else {
        // Most likely memory, which stays short: repeated separately, and apart from now on.
        ++joint_failures_;
        joint_off_ = true;
        kforge::log::warn("kforge sampler: a joint call for new groups and episode turns failed (" + c.message() +
                          "); generated separately, and from now on new groups and turns are generated apart");
      }
    }
    if (!joint) apart.insert(apart.end(), joined.begin(), joined.end());
    run_groups(requests, apart, out.groups);
    if (!joint) conts = turns_->continue_all(*this, pending.contexts, pending.seeds);
    out.turns = turns_->finish(std::move(pending), std::move(conts));
    return out;
  }

  std::vector<std::pair<std::string, std::uint64_t>> take_counters() override {
    std::vector<std::pair<std::string, std::uint64_t>> out;
    if (joint_calls_ > 0) out.emplace_back("joint_calls", std::exchange(joint_calls_, 0));
    if (joint_failures_ > 0) out.emplace_back("joint_call_failures", std::exchange(joint_failures_, 0));
    return out;
  }

  std::size_t max_batch() const override {
    return static_cast<std::size_t>(std::max(1, o_.sampler.batch_requests));
  }
  // As many sequences as a batch of first turns decodes: batch_requests groups of group_size. (With
  // max_batch turns, 8 sequences a call, the turns of a 3-turn run on an H100 decoded 8 rows where
  // first turns decoded 64, and a step took 99 s instead of about 54.)
  std::size_t max_turn_batch() const override {
    return max_batch() * static_cast<std::size_t>(std::max(1, o_.sampler.group_size));
  }

  // The pump's early word of an NCCL version: the receiver takes it while this sampler generates.
  // A file version instead means the trainer has given NCCL up for good (a broadcast failed or
  // timed out there): the receiver stops too, rather than wait out its own timeout for a version
  // the trainer has abandoned.
  void weights_arrived(const wire::PolicyWeights& w) override {
#if defined(KFORGE_WITH_CUDA)
    if (!receiver_) return;
    if (w.transport() == wire::WeightsTransport::nccl) {
      if (auto b = broadcast_of(w)) receiver_->announce(*b);
    } else {
      receiver_->stop("the trainer publishes by file now");
    }
#else
    (void)w;
#endif
  }

  void shutting_down() override {
#if defined(KFORGE_WITH_CUDA)
    if (receiver_) receiver_->stop("the process is stopping");
#endif
  }

  status set_weights(const wire::PolicyWeights& w) override {
    auto s = apply_weights(w);
    if (s) version_ = w.version();
    return s;
  }

  // The next turns of episodes (stages/episode_turn_sampler.hpp), through this engine's policy.
  std::vector<result<wire::CandidateT>> next_turns(const std::vector<turn_item>& turns) override {
    if (!turns_) return actors::sampler_logic::next_turns(turns);
    return turns_->next_turns(*this, turns);
  }

  /// Episodes of [agent] max_turns > 1: first turns carry their episode state, later turns are
  /// generated from observations.
  void run_episodes(episode_turn_sampler t) { turns_.emplace(std::move(t)); }

 private:
  status apply_weights(const wire::PolicyWeights& w) {
    const std::string where = "engine sampler: weights version " + std::to_string(w.version()) + ": ";
    switch (w.transport()) {
      case wire::WeightsTransport::file: {
        const std::string path = w.path() ? w.path()->str() : "";
        if (path.empty()) return error{where + "transport file without a path"};
        if (w.adapter()) return load_adapter_dir(where, path);
        std::error_code ec;
        const auto size = std::filesystem::file_size(path, ec);
        if (ec) return error{where + path + ": " + ec.message()};
        if (w.bytes() != 0 && w.bytes() != size)
          return error{where + path + ": the file has " + std::to_string(size) + " bytes, the message says " +
                       std::to_string(w.bytes()) + " (still being written, or replaced?)"};
        auto f = model::safetensors_file::open(path);
        if (!f) return error{where + f.message()};
        return load(where, std::move(*f));
      }
      case wire::WeightsTransport::inline_bytes: {
        const auto* data = w.data();
        if (data == nullptr || data->size() == 0) return error{where + "transport inline_bytes without data"};
        if (w.bytes() != 0 && w.bytes() != data->size())
          return error{where + "inline data has " + std::to_string(data->size()) + " bytes, the message says " +
                       std::to_string(w.bytes())};
        auto f = model::safetensors_file::from_bytes(std::vector<std::uint8_t>(data->begin(), data->end()),
                                                     "<inline weights>");
        if (!f) return error{where + f.message()};
        return load(where, std::move(*f));
      }
      case wire::WeightsTransport::nccl: {
#if defined(KFORGE_WITH_CUDA)
        if (!receiver_) return error{where + "transport nccl, and this sampler is in no NCCL group (trainer.publish)"};
        auto b = broadcast_of(w);
        if (!b) return error{where + b.message()};
        if (auto s = receiver_->apply(*b, *model_); !s) return error{where + s.message()};
        return status::success();
#else
        return error{where + "transport nccl, and this kforge was built without CUDA"};
#endif
      }
    }
    return error{where + "unknown transport " + std::to_string(static_cast<int>(w.transport()))};
  }

 private:
  // LoRA adapters applied unmerged on the base weights, switched on (a version's, published with
  // trainer.publish = "adapters", or one kforge serve loads): replace_lora checks the whole
  // directory before it changes the model, so a bad one leaves the adapters that were on (or none).
  status load_adapter_dir(const std::string& where, const std::string& dir) {
    off_.reset();
    try {
      if (auto s = model::replace_lora(*model_, dir); !s) return error{where + s.message()};
    } catch (const c10::Error& e) {
      return error{where + "copying " + dir + " failed: " + e.what_without_backtrace()};
    }
    *model_->lora->enabled = true;
    return status::success();
  }

  // load_weights checks every tensor before copying any, so on error the old weights stay.
  status load(const std::string& where, model::safetensors_file f) {
    try {
      auto s = model::load_weights(*model_, model::checkpoint_tensors::of(std::move(f)));
      if (!s) return error{where + s.message()};
      return status::success();
    } catch (const c10::Error& e) {
      return error{where + "copying the weights failed: " + e.what_without_backtrace()};
    }
  }

  // A request checked and tokenized, with its sampling settings.
  struct prepared {
    std::size_t item = 0;
    std::string where;  ///< "engine sampler: request N (task T): ", for errors
    model::sampling_options options;
    std::vector<std::int64_t> ids;
  };

  result<prepared> prepare(const wire::GenerateRequest& req, const actors::envelope_info& info) const {
    prepared p;
    const std::string task = req.task() && req.task()->id() ? req.task()->id()->str() : "";
    p.where = "engine sampler: request " + std::to_string(info.sample_id) +
              (task.empty() ? "" : " (task " + task + ")") + ": ";
    if (req.prompt() == nullptr || req.prompt()->size() == 0) return error{p.where + "the request has no prompt"};
    const std::string_view prompt(req.prompt()->c_str(), req.prompt()->size());
    const auto& d = o_.sampler;
    auto& so = p.options;
    so.n = req.group_size() >= 1 ? req.group_size() : d.group_size;
    // The wire carries floats: one equal to [sampler]'s value in float precision is that value, so
    // that groups, episodes' turns and the trainer's scoring use one temperature (0.8f is not 0.8).
    const auto exact = [](float sent, double configured) {
      return static_cast<float>(configured) == sent ? configured : static_cast<double>(sent);
    };
    so.temperature = req.temperature() > 0 ? exact(req.temperature(), d.temperature) : d.temperature;
    so.top_p = req.top_p() > 0 && req.top_p() <= 1 ? exact(req.top_p(), d.top_p) : d.top_p;
    so.max_new_tokens = req.max_new_tokens() >= 1 ? std::min<std::int64_t>(req.max_new_tokens(), d.max_new_tokens)
                                                  : d.max_new_tokens;
    so.stop_tokens = stops_;
    so.pad_token = pad_;
    so.seed = group_seed(o_.seed, info.sample_id);
    p.ids = tok_.encode(chat_.wrap(prompt), chat_.add_special_tokens());
    return p;
  }

  static bool same_settings(const model::sampling_options& a, const model::sampling_options& b) {
    return a.n == b.n && a.temperature == b.temperature && a.top_p == b.top_p &&
           a.max_new_tokens == b.max_new_tokens;
  }

  // Whether a request samples at the settings episodes' turns are continued at.
  bool sampled_as_turns(const model::sampling_options& a) const {
    const auto& t = turns_->sampling();
    return a.temperature == t.temperature && a.top_p == t.top_p && a.max_new_tokens == t.max_new_tokens;
  }

  // Each request checked and tokenized; a request that fails has its error in `out`.
  std::vector<prepared> prepare_all(const std::vector<request_item>& items,
                                    std::vector<result<std::vector<wire::CandidateT>>>& out) const {
    std::vector<prepared> ready;
    for (std::size_t i = 0; i < items.size(); ++i) {
      auto p = prepare(*items[i].request, items[i].info);
      if (!p) {
        out[i] = p.err();
        continue;
      }
      p->item = i;
      ready.push_back(std::move(*p));
    }
    return ready;
  }

  // The requests, those with equal sampling settings in one model::generate call each.
  void run_groups(const std::vector<request_item>& items, const std::vector<const prepared*>& ready,
                  std::vector<result<std::vector<wire::CandidateT>>>& out) {
    std::vector<bool> done(ready.size(), false);
    for (std::size_t a = 0; a < ready.size(); ++a) {
      if (done[a]) continue;
      std::vector<const prepared*> group;
      for (std::size_t b = a; b < ready.size(); ++b)
        if (!done[b] && same_settings(ready[a]->options, ready[b]->options)) {
          group.push_back(ready[b]);
          done[b] = true;
        }
      run_group(items, group, out);
    }
  }

  void run_group(const std::vector<request_item>& items, const std::vector<const prepared*>& group,
                 std::vector<result<std::vector<wire::CandidateT>>>& out) {
    if (auto r = generate_rows(items, group, {}, {}, out); !r)
      for (const auto* p : group) out[p->item] = error{p->where + r.message()};
  }

  // One model::generate call for `group`'s requests (at the first one's settings, n rows each) and
  // after them one row per context (episodes' next turns; none for new groups alone), every prompt
  // drawing from its own seed. The requests' candidates go to `out`; the contexts' continuations
  // are returned, in order.
  result<std::vector<result<continuation>>> generate_rows(const std::vector<request_item>& items,
                                                          const std::vector<const prepared*>& group,
                                                          const std::vector<std::vector<std::int32_t>>& contexts,
                                                          const std::vector<std::uint64_t>& seeds,
                                                          std::vector<result<std::vector<wire::CandidateT>>>& out) {
    model::sampling_options so = group.front()->options;
    std::vector<std::vector<std::int64_t>> prompts;
    so.prompt_n.clear();
    so.prompt_seeds.clear();
    for (const auto* p : group) {
      prompts.push_back(p->ids);
      so.prompt_n.push_back(p->options.n);
      so.prompt_seeds.push_back(p->options.seed);
    }
    for (std::size_t k = 0; k < contexts.size(); ++k) {
      prompts.emplace_back(contexts[k].begin(), contexts[k].end());
      so.prompt_n.push_back(1);
      so.prompt_seeds.push_back(seeds[k]);
    }
    if (o_.device >= 0) so.device_use = gpu_use_;
    auto gens = model::generate(*model_, prompts, so, &tok_);
    if (!gens) return gens.err();
    std::vector<model::generation> group_rows;
    std::vector<result<continuation>> conts(contexts.size(), error{"not generated"});
    for (auto& g : *gens) {
      if (g.prompt < group.size()) group_rows.push_back(std::move(g));
      else conts[g.prompt - group.size()] = continuation_of(g);
    }
    store_groups(items, group, group_rows, out);
    return conts;
  }

  // Candidates of `group`'s requests from their generations (g.prompt indexes `group`).
  void store_groups(const std::vector<request_item>& items, const std::vector<const prepared*>& group,
                    std::vector<model::generation>& gens, std::vector<result<std::vector<wire::CandidateT>>>& out) {
    std::vector<std::vector<wire::CandidateT>> per(group.size());
    for (auto& g : gens) {
      const prepared& p = *group[g.prompt];
      const wire::GenerateRequest& req = *items[p.item].request;
      wire::CandidateT c;
      c.task.reset(req.task() ? req.task()->UnPack() : nullptr);
      c.prompt_hash = req.prompt_hash();
      c.completion = std::move(g.text);
      c.source = candidate_source(c.completion);
      c.code_hash = fnv1a64(c.source);
      c.prompt_tokens.assign(p.ids.begin(), p.ids.end());
      c.completion_tokens.assign(g.tokens.begin(), g.tokens.end());
      c.logprobs = std::move(g.logprobs);
      if (turns_) c.episode = agent::first_turn(p.ids.size(), o_.agent.max_turns, version_, &req);
      per[g.prompt].push_back(std::move(c));
    }
    for (std::size_t k = 0; k < group.size(); ++k) out[group[k]->item] = std::move(per[k]);
  }

  std::vector<std::int32_t> prompt_ids(std::string_view prompt) const override {
    return narrow(tok_.encode(chat_.wrap(prompt), chat_.add_special_tokens()));
  }

  std::vector<std::int32_t> follow_up_ids(std::string_view message,
                                          const std::vector<std::int32_t>& previous) const override {
    const bool closed = !previous.empty() &&
                        std::find(stops_.begin(), stops_.end(), previous.back()) != stops_.end();
    return narrow(tok_.encode(chat_.follow_up(message, closed), false));
  }

  std::string decode(const std::vector<std::int32_t>& ids) const override {
    return tok_.decode(std::vector<std::int64_t>(ids.begin(), ids.end()), false);
  }

  result<std::vector<continuation>> continue_each(const std::vector<std::vector<std::int32_t>>& contexts,
                                                  const std::vector<std::uint64_t>& seeds, double temperature,
                                                  double top_p, int max_new_tokens) override {
    if (contexts.size() != seeds.size()) return error{"engine policy: one seed per context"};
    if (contexts.empty()) return std::vector<continuation>{};
    auto so = policy_sampling(1, temperature, top_p, max_new_tokens);
    so.prompt_seeds = seeds;
    std::vector<std::vector<std::int64_t>> prompts;
    for (const auto& c : contexts) prompts.emplace_back(c.begin(), c.end());
    auto gens = model::generate(*model_, prompts, so, &tok_);
    if (!gens) return error{"engine policy: " + gens.message()};
    std::vector<continuation> out(contexts.size());
    for (auto& g : *gens) out[g.prompt] = continuation_of(g);
    return out;
  }

  void release_cached_memory() override { model::release_torch_cache(); }

  result<std::vector<continuation>> sample_group(const std::vector<std::int32_t>& context, int n,
                                                 std::uint64_t seed, double temperature, double top_p,
                                                 int max_new_tokens) override {
    auto groups = sample_groups({context}, n, {seed}, temperature, top_p, max_new_tokens);
    if (!groups) return groups.err();
    return std::move(groups->front());
  }

  // One model::generate call; each context's rows draw from their own seed (prompt_seeds), as
  // run_group passes the requests of a batch, so a group is the same alone or batched.
  result<std::vector<std::vector<continuation>>> sample_groups(const std::vector<std::vector<std::int32_t>>& contexts,
                                                               int n, const std::vector<std::uint64_t>& seeds,
                                                               double temperature, double top_p,
                                                               int max_new_tokens) override {
    if (n < 1) return error{"engine policy: n must be at least 1"};
    if (contexts.size() != seeds.size()) return error{"engine policy: one seed per context"};
    if (contexts.empty()) return std::vector<std::vector<continuation>>{};
    auto so = policy_sampling(n, temperature, top_p, max_new_tokens);
    so.seed = seeds.front();
    so.prompt_seeds = seeds;
    std::vector<std::vector<std::int64_t>> prompts;
    for (const auto& c : contexts) prompts.emplace_back(c.begin(), c.end());
    auto gens = model::generate(*model_, prompts, so, &tok_);
    if (!gens) return error{"engine policy: " + gens.message()};
    std::vector<std::vector<continuation>> out(contexts.size());
    for (auto& g : *gens) out[g.prompt].push_back(continuation_of(g));  // prompt-major, samples in order
    return out;
  }

  // The engine policy's sampling settings: this checkpoint's stops and padding, and the GPU's
  // shared use while generating.
  model::sampling_options policy_sampling(int n, double temperature, double top_p, int max_new_tokens) const {
    model::sampling_options so;
    so.n = n;
    so.temperature = temperature;
    so.top_p = top_p;
    so.max_new_tokens = max_new_tokens;
    so.stop_tokens = stops_;
    so.pad_token = pad_;
    if (o_.device >= 0) so.device_use = gpu_use_;
    return so;
  }

  static continuation continuation_of(model::generation& g) {
    continuation c;
    c.tokens = narrow(g.tokens);
    c.logprobs = std::move(g.logprobs);
    c.text = std::move(g.text);
    return c;
  }

  status load_weights_file(const std::string& path) override {
    auto f = model::safetensors_file::open(path);
    if (!f) return error{"engine policy: " + f.message()};
    return load("engine policy: ", std::move(*f));
  }

  status load_adapter(const std::string& dir) override { return load_adapter_dir("engine policy: LoRA adapter: ", dir); }

  status unload_adapter() override {
    off_.reset();
    model::remove_lora(*model_);
    return status::success();
  }

  bool adapter_on() const override { return model_->lora && *model_->lora->enabled; }

  void switch_adapter(bool on) override {
    if (on) off_.reset();
    else if (!off_ && model_->lora) off_.emplace(*model_);
  }

  static std::vector<std::int32_t> narrow(const std::vector<std::int64_t>& ids) {
    return std::vector<std::int32_t>(ids.begin(), ids.end());
  }

  engine_sampler_options o_;
  std::optional<episode_turn_sampler> turns_;  ///< set with [agent] max_turns > 1
  bool joint_off_ = false;                     ///< a joint call failed: groups and turns apart from then on
  std::uint64_t joint_calls_ = 0;              ///< groups and turns generated in one call (take_counters)
  std::uint64_t joint_failures_ = 0;           ///< joint calls that failed and were repeated apart
  std::uint64_t version_ = 0;                  ///< of the weights held, for first turns' episodes
  // On a GPU: a host-wide shared use of it while generation's work is on it, so that a sandbox
  // timing on the same GPU (one GPU for rollout and sandbox) times alone.
  std::function<void(bool)> gpu_use_ = [held = std::make_shared<std::optional<gpu_use_lock>>(),
                                        gpu = o_.device >= 0 ? physical_gpu(o_.device) : std::string()](
                                           bool in_use) {
    if (in_use) held->emplace(gpu, false);
    else held->reset();
  };
  model::CausalLM model_;
  std::optional<model::lora_disabled> off_;  ///< while a base-model generation runs under an adapter
  model::tokenizer tok_;
  model::chat_format chat_;
  std::vector<std::int64_t> stops_;
  std::int64_t pad_ = 0;
#if defined(KFORGE_WITH_CUDA)
  std::unique_ptr<trainer::weight_receiver> receiver_;  ///< NCCL weights; null: files only

 public:
  void receive_by(std::unique_ptr<trainer::weight_receiver> r) { receiver_ = std::move(r); }
  model::CausalLMImpl& model() { return *model_; }
#endif
};

}  // namespace

std::string candidate_source(std::string_view completion) {
  auto block = tasks::extract_kernel_source(completion);
  return block ? std::move(block).value() : std::string(completion);
}

std::uint64_t group_seed(std::uint64_t run_seed, std::uint64_t sample_id) noexcept {
  const std::uint64_t both[2] = {run_seed, sample_id};
  return fnv1a64(both, sizeof both);
}

namespace {

/// The checkpoint, tokenizer, chat format and stop tokens of `o`, as an engine.
result<std::shared_ptr<engine_sampler>> load_engine(const engine_sampler_options& o) {
  const std::string& dir = o.sampler.model;
  if (dir.empty()) return error{"engine sampler: [sampler] model is empty: name a checkpoint directory"};
  const std::string tok_dir = o.tokenizer_dir.empty() ? dir : o.tokenizer_dir;
  model::load_options lo;
  if (o.device >= 0) {
    const int n = visible_cuda_devices();
    if (o.device >= n)
      return error{"engine sampler: CUDA device " + std::to_string(o.device) + " requested, LibTorch sees " +
                   std::to_string(n)};
    lo.device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(o.device));
    lo.dtype = at::kBFloat16;
  }
  auto m = model::load_causal_lm(dir, lo);
  if (!m) return error{"engine sampler: " + m.message()};
  auto tok = model::tokenizer::load(tok_dir);
  if (!tok) return error{"engine sampler: " + tok.message()};
  const model::model_config& config = (*m)->config;
  if (tok->vocab_size() > config.vocab_size)
    return error{"engine sampler: " + tok_dir + ": the tokenizer has " + std::to_string(tok->vocab_size()) +
                 " ids, more than the model's vocab_size " + std::to_string(config.vocab_size) + " (" + dir + ")"};
  auto defaults = model::load_generation_defaults(dir, *tok, o.tokenizer_dir);
  if (!defaults) return error{"engine sampler: " + defaults.message()};
  auto chat = model::detect_chat_format(defaults->chat_template, *tok, defaults->bos_token,
                                        (std::filesystem::path(tok_dir) / "tokenizer_config.json").string());
  if (!chat) return error{"engine sampler: " + chat.message()};
  std::vector<std::int64_t> stops = defaults->stop_tokens;
  if (stops.empty()) stops = config.eos_token_ids;
  const std::int64_t pad = defaults->pad_token.value_or(stops.empty() ? 0 : stops.front());
  return std::make_shared<engine_sampler>(o, std::move(*m), std::move(*tok), std::move(*chat),
                                         std::move(stops), pad);
}

}  // namespace

result<std::shared_ptr<engine_policy>> load_engine_policy(const engine_sampler_options& o) {
  auto engine = load_engine(o);
  if (!engine) return engine.err();
  return std::shared_ptr<engine_policy>(std::move(*engine));
}

result<std::shared_ptr<actors::sampler_logic>> make_engine_sampler(const engine_sampler_options& o) {
  auto loaded = load_engine(o);
  if (!loaded) return loaded.err();
  auto sampler = std::move(*loaded);
  if (o.agent.max_turns > 1) {
    auto t = episode_turn_sampler::make(o.agent, o.sampler, o.seed);
    if (!t) return error{"engine sampler: " + t.message()};
    sampler->run_episodes(std::move(*t));
  }
  if (o.publish_rank > 0) {
#if defined(KFORGE_WITH_CUDA)
    if (o.device < 0) return error{"engine sampler: NCCL weights need the sampler on a GPU"};
    auto r = trainer::weight_receiver::create(sampler->model(), o.device, o.publish_rank, o.publish_timeout);
    if (!r) return error{"engine sampler: " + r.message()};
    sampler->receive_by(std::move(*r));
#else
    return error{"engine sampler: NCCL weights asked for, and this kforge was built without CUDA"};
#endif
  }
  return std::shared_ptr<actors::sampler_logic>(std::move(sampler));
}

result<engine_sampler_options> engine_sampler_options_from(const manifest& m, const std::string& process) {
  engine_sampler_options o;
  o.sampler = m.sampler;
  o.agent = m.agent;
  o.seed = static_cast<std::uint64_t>(m.run.seed);
  auto gpus = stage_gpus(m, actor_kind::sampler);
  if (!gpus) return error{"engine sampler: " + gpus.message()};
  if (auto s = check_sampler_gpu(m); !s) return error{"engine sampler: " + s.message()};
  // make_engine_sampler checks that LibTorch sees this GPU too (a CPU LibTorch on a GPU host
  // does not).
  if (!gpus->empty()) o.device = gpus->front();
  auto plan = plan_weights_publish(m, trainer::nccl_built);
  if (!plan) return error{"engine sampler: " + plan.message()};
  if (plan->nccl) {
    const auto it = plan->sampler_rank.find(process);
    if (it == plan->sampler_rank.end())
      return error{"engine sampler: weights go by NCCL and process \"" + process + "\" hosts no sampler of the plan"};
    o.publish_rank = it->second;
    o.publish_timeout = publish_timeout(m.trainer);
  }
  return o;
}

}  // namespace kforge::pipeline

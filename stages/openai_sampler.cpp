#include "stages/openai_sampler.hpp"

#include <algorithm>
#include <filesystem>
#include <future>
#include <optional>

#include "agent/episode_turns.hpp"
#include "common/hash.hpp"
#include "config/manifest.hpp"
#include "stages/chat_tokens.hpp"
#include "stages/episode_turn_sampler.hpp"

namespace kforge::pipeline {

namespace {

class openai_sampler final : public actors::sampler_logic, public engine_policy {
 public:
  openai_sampler(openai_sampler_options o, chat_tokens tokens, std::shared_ptr<replica_pool> pool,
                 std::shared_ptr<inference_servers> servers)
      : o_(std::move(o)), tokens_(std::move(tokens)), pool_(std::move(pool)), servers_(std::move(servers)) {}

  result<std::vector<wire::CandidateT>> generate(const wire::GenerateRequest& req,
                                                 const actors::envelope_info& info) override {
    auto out = generate_batch({{&req, info}});
    return std::move(out.front());
  }

  // Every request in flight at once: the servers batch them (continuous batching), and the pool
  // spreads them over the replicas.
  std::vector<result<std::vector<wire::CandidateT>>> generate_batch(const std::vector<request_item>& items) override {
    std::vector<result<std::vector<wire::CandidateT>>> out(items.size(), error{"not generated"});
    std::vector<std::future<result<std::vector<completion_choice>>>> pending(items.size());
    std::vector<std::optional<prepared>> ready(items.size());
    for (std::size_t i = 0; i < items.size(); ++i) {
      auto p = prepare(*items[i].request, items[i].info);
      if (!p) {
        out[i] = p.err();
        continue;
      }
      ready[i] = std::move(*p);
      pending[i] = std::async(std::launch::async, [this, r = ready[i]->request, where = ready[i]->where] {
        return pool_->complete(r, where);
      });
    }
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (!ready[i]) continue;
      auto choices = pending[i].get();
      if (!choices) {
        out[i] = choices.err();
        continue;
      }
      const wire::GenerateRequest& req = *items[i].request;
      const auto& ids = ready[i]->request.prompt;
      std::vector<wire::CandidateT> group;
      for (auto& ch : *choices) {
        wire::CandidateT c;
        c.task.reset(req.task() ? req.task()->UnPack() : nullptr);
        c.prompt_hash = req.prompt_hash();
        // The text from the ids, as the engine decodes it, so what the sandbox compiles is what the
        // trainer scores whatever the server's detokenizer does.
        c.completion = tokens_.completion_text(ch.tokens);
        c.source = candidate_source(c.completion);
        c.code_hash = fnv1a64(c.source);
        c.prompt_tokens.assign(ids.begin(), ids.end());
        c.completion_tokens.assign(ch.tokens.begin(), ch.tokens.end());
        c.logprobs = std::move(ch.logprobs);
        if (turns_) c.episode = agent::first_turn(ids.size(), o_.agent.max_turns, version_, &req);
        group.push_back(std::move(c));
      }
      out[i] = std::move(group);
    }
    return out;
  }

  std::size_t max_batch() const override { return static_cast<std::size_t>(std::max(1, o_.sampler.batch_requests)); }
  // A turn is one sequence where a request asks for a group: as many in flight as a batch of groups.
  std::size_t max_turn_batch() const override {
    return max_batch() * static_cast<std::size_t>(std::max(1, o_.sampler.group_size));
  }

  status set_weights(const wire::PolicyWeights& w) override {
    const std::string where = "openai sampler: weights version " + std::to_string(w.version()) + ": ";
    if (w.transport() != wire::WeightsTransport::file)
      return error{where + "the servers load weights from a file; this version came by another transport "
                           "(trainer.publish = \"file\")"};
    const std::string path = w.path() ? w.path()->str() : "";
    if (path.empty()) return error{where + "transport file without a path"};
    const auto s = w.adapter() ? pool_->load_adapter("kforge-v" + std::to_string(w.version()), path, w.version(),
                                                     o_.sampler.adapter_api)
                               : pool_->update_weights(path, w.version());
    if (!s) return error{where + s.message()};
    version_ = w.version();
    return {};
  }

  std::vector<result<wire::CandidateT>> next_turns(const std::vector<turn_item>& turns) override {
    if (!turns_) return actors::sampler_logic::next_turns(turns);
    return turns_->next_turns(*this, turns);
  }

  void run_episodes(episode_turn_sampler t) { turns_.emplace(std::move(t)); }

  // engine_policy: the tokenizer here, the model on the servers.
  std::vector<std::int32_t> prompt_ids(std::string_view prompt) const override { return tokens_.prompt_ids(prompt); }
  std::vector<std::int32_t> follow_up_ids(std::string_view message,
                                          const std::vector<std::int32_t>& previous) const override {
    return tokens_.follow_up_ids(message, previous);
  }
  std::string decode(const std::vector<std::int32_t>& ids) const override { return tokens_.decode(ids, false); }

  result<std::vector<continuation>> continue_each(const std::vector<std::vector<std::int32_t>>& contexts,
                                                  const std::vector<std::uint64_t>& seeds, double temperature,
                                                  double top_p, int max_new_tokens) override {
    if (contexts.size() != seeds.size()) return error{"openai policy: one seed per context"};
    std::vector<std::future<result<std::vector<completion_choice>>>> pending;
    for (std::size_t k = 0; k < contexts.size(); ++k) {
      completion_request r;
      r.prompt = contexts[k];
      r.n = 1;
      r.temperature = temperature;
      r.top_p = top_p;
      r.max_tokens = max_new_tokens;
      r.seed = seeds[k];
      pending.push_back(std::async(std::launch::async, [this, r = std::move(r), k] {
        return pool_->complete(r, "openai policy: context " + std::to_string(k) + ": ");
      }));
    }
    std::vector<continuation> out(contexts.size());
    std::optional<error> first;
    for (std::size_t k = 0; k < pending.size(); ++k) {
      auto c = pending[k].get();  // every future waited on, whatever failed
      if (!c) {
        if (!first) first = c.err();
        continue;
      }
      auto& ch = c->front();
      out[k].tokens = std::move(ch.tokens);
      out[k].logprobs = std::move(ch.logprobs);
      out[k].text = tokens_.completion_text(out[k].tokens);
    }
    if (first) return *first;
    return out;
  }

 private:
  struct prepared {
    std::string where;
    completion_request request;
  };

  result<prepared> prepare(const wire::GenerateRequest& req, const actors::envelope_info& info) const {
    prepared p;
    const std::string task = req.task() && req.task()->id() ? req.task()->id()->str() : "";
    p.where = "openai sampler: request " + std::to_string(info.sample_id) + (task.empty() ? "" : " (task " + task + ")") + ": ";
    if (req.prompt() == nullptr || req.prompt()->size() == 0) return error{p.where + "the request has no prompt"};
    const auto& d = o_.sampler;
    auto& r = p.request;
    r.n = req.group_size() >= 1 ? static_cast<int>(req.group_size()) : d.group_size;
    r.temperature = req.temperature() > 0 ? req.temperature() : d.temperature;
    r.top_p = req.top_p() > 0 && req.top_p() <= 1 ? req.top_p() : d.top_p;
    r.max_tokens = req.max_new_tokens() >= 1 ? std::min<int>(static_cast<int>(req.max_new_tokens()), d.max_new_tokens)
                                             : d.max_new_tokens;
    r.seed = group_seed(o_.seed, info.sample_id);
    r.prompt = tokens_.prompt_ids(std::string_view(req.prompt()->c_str(), req.prompt()->size()));
    return p;
  }

  openai_sampler_options o_;
  chat_tokens tokens_;
  std::shared_ptr<replica_pool> pool_;
  std::optional<episode_turn_sampler> turns_;
  std::uint64_t version_ = 0;
  // Last: the servers this sampler started stop when it goes, after the pool that talks to them.
  std::shared_ptr<inference_servers> servers_;
};

}  // namespace

openai_sampler_options openai_sampler_options_from(const manifest& m) {
  openai_sampler_options o;
  o.sampler = m.sampler;
  if (!m.sampler.server_url.empty()) o.urls.push_back(m.sampler.server_url);
  for (const auto& u : m.sampler.server_urls)
    if (std::find(o.urls.begin(), o.urls.end(), u) == o.urls.end()) o.urls.push_back(u);
  o.seed = static_cast<std::uint64_t>(m.run.seed);
  o.agent = m.agent;
  if (auto gpus = stage_gpus(m, actor_kind::sampler)) o.server_gpus = *gpus;
  o.server_log_dir = (std::filesystem::path(m.run.run_dir) / "logs").string();
  return o;
}

result<openai_sampler_handles> make_openai_sampler_handles(const openai_sampler_options& o) {
  auto tokens = chat_tokens::load(o.sampler.model, o.tokenizer_dir);
  if (!tokens) return error{"openai sampler: [sampler] model (the tokenizer files): " + tokens.message()};
  std::shared_ptr<inference_servers> servers;
  auto urls = o.urls;
  if (o.sampler.server.enabled) {
    auto started = inference_servers::start(o.sampler.server, o.server_gpus, o.server_log_dir);
    if (!started) return error{"openai sampler: " + started.message()};
    servers = std::move(*started);
    urls.insert(urls.end(), servers->urls().begin(), servers->urls().end());
  }
  auto pool = replica_pool::make(urls, o.pool);
  if (!pool) return error{"openai sampler: " + pool.message()};
  if (auto s = (*pool)->check_health(); !s) return error{"openai sampler: " + s.message()};
  if (auto id = (*pool)->served_model(); !id) return error{"openai sampler: " + id.message()};
  auto sampler = std::make_shared<openai_sampler>(o, std::move(*tokens), *pool, servers);
  if (o.agent.max_turns > 1) {
    auto t = episode_turn_sampler::make(o.agent, o.sampler, o.seed);
    if (!t) return error{"openai sampler: " + t.message()};
    sampler->run_episodes(std::move(*t));
  }
  return openai_sampler_handles{sampler, sampler, *pool, servers};
}

result<std::shared_ptr<actors::sampler_logic>> make_openai_sampler(const openai_sampler_options& o) {
  auto h = make_openai_sampler_handles(o);
  if (!h) return h.err();
  return std::move(h->sampler);
}

}  // namespace kforge::pipeline

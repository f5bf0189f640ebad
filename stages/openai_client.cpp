#include "stages/openai_client.hpp"

#include <algorithm>
#include <iostream>
#include <limits>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

namespace kforge::pipeline {

using json = nlohmann::json;

struct replica_pool::replica {
  std::string url;     ///< as given, for messages
  std::string origin;  ///< scheme://host:port, for httplib
  std::string prefix;  ///< the path before /v1 ("" or "/something")
  std::uint64_t in_flight = 0;
  std::uint64_t answered = 0;
  int failures = 0;  ///< in a row
  bool dropped = false;
  std::chrono::steady_clock::time_point resting_until{};  ///< skipped before this, after a failure
  std::chrono::steady_clock::time_point last_failure{};   ///< when the last counted failure came
};

namespace {

// "http://h:8000/v1/" -> origin "http://h:8000", prefix "" (kforge adds /v1/... itself).
result<std::pair<std::string, std::string>> split_url(const std::string& url) {
  const auto scheme = url.find("://");
  if (scheme == std::string::npos || (url.compare(0, scheme, "http") != 0 && url.compare(0, scheme, "https") != 0))
    return error{"server URL \"" + url + "\": expected http://HOST:PORT[/v1]"};
  const auto path = url.find('/', scheme + 3);
  std::string origin = url.substr(0, path);
  std::string prefix = path == std::string::npos ? "" : url.substr(path);
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  if (prefix.size() >= 3 && prefix.compare(prefix.size() - 3, 3, "/v1") == 0) prefix.resize(prefix.size() - 3);
  if (origin.size() <= scheme + 3) return error{"server URL \"" + url + "\": no host"};
  return std::make_pair(std::move(origin), std::move(prefix));
}

std::string clip(std::string s, std::size_t n = 300) {
  if (s.size() > n) s = s.substr(0, n) + "...";
  return s;
}

// One HTTP exchange's outcome: a status and body, or why there is none.
struct exchange {
  int status = 0;  ///< 0: no answer
  std::string body;
  std::string failure;  ///< when status is 0
};

exchange send(const replica_pool::replica& r, const replica_pool_options& o, const std::string& method,
              const std::string& path, const std::string& body) {
  httplib::Client c(r.origin);
  c.set_connection_timeout(o.connect_timeout);
  c.set_read_timeout(o.read_timeout);
  c.set_write_timeout(o.connect_timeout);
  const std::string full = r.prefix + path;
  auto res = method == "GET" ? c.Get(full) : c.Post(full, body, "application/json");
  exchange e;
  if (!res) {
    e.failure = httplib::to_string(res.error());
    return e;
  }
  e.status = res->status;
  e.body = res->body;
  return e;
}

// "token_id:123" (vLLM's return_tokens_as_token_ids) -> 123.
std::optional<std::int32_t> token_id_of(const json& t) {
  if (t.is_number_integer()) return t.get<std::int32_t>();
  if (!t.is_string()) return std::nullopt;
  const auto s = t.get<std::string>();
  static const std::string tag = "token_id:";
  if (s.compare(0, tag.size(), tag) != 0) return std::nullopt;
  try {
    std::size_t used = 0;
    const long long v = std::stoll(s.substr(tag.size()), &used);
    if (used != s.size() - tag.size() || v < 0 || v > std::numeric_limits<std::int32_t>::max()) return std::nullopt;
    return static_cast<std::int32_t>(v);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace

std::string completion_body(const completion_request& r, const std::string& model, const adapter_in_use& adapter) {
  json j;
  if (!model.empty()) j["model"] = model;
  if (!adapter.name.empty()) {
    if (adapter.api == adapter_api::vllm) j["model"] = adapter.name;
    else j["lora_path"] = adapter.name;
  }
  j["prompt"] = r.prompt;
  j["n"] = r.n;
  j["temperature"] = r.temperature;
  j["top_p"] = r.top_p;
  j["max_tokens"] = r.max_tokens;
  if (r.seed) j["seed"] = *r.seed;
  j["logprobs"] = 1;
  j["return_tokens_as_token_ids"] = true;
  j["return_token_ids"] = true;
  j["stream"] = false;
  return j.dump();
}

std::string error_message_of(const std::string& body) {
  const auto j = json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("error")) {
    const auto& e = j["error"];
    if (e.is_object() && e.contains("message") && e["message"].is_string()) return e["message"].get<std::string>();
    if (e.is_string()) return e.get<std::string>();
  }
  if (j.is_object() && j.contains("message") && j["message"].is_string()) return j["message"].get<std::string>();
  return clip(body);
}

result<std::vector<completion_choice>> parse_completion(const std::string& body, int n) {
  const auto j = json::parse(body, nullptr, false);
  if (j.is_discarded())
    return error{"the response is not JSON (cut short?): " + clip(body, 120) + " (" + std::to_string(body.size()) +
                 " bytes)"};
  if (!j.is_object()) return error{"the response is not a JSON object"};
  if (j.contains("error") && !j["error"].is_null()) return error{"the server answered an error: " + error_message_of(body)};
  if (!j.contains("choices") || !j["choices"].is_array()) return error{"the response has no \"choices\" array"};
  const auto& choices = j["choices"];
  if (static_cast<int>(choices.size()) != n)
    return error{"asked for n = " + std::to_string(n) + " choices, got " + std::to_string(choices.size())};
  std::vector<completion_choice> out(static_cast<std::size_t>(n));
  std::vector<bool> seen(static_cast<std::size_t>(n), false);
  for (std::size_t k = 0; k < choices.size(); ++k) {
    const auto& c = choices[k];
    const std::string at = "choice " + std::to_string(k) + ": ";
    if (!c.is_object()) return error{at + "not an object"};
    std::size_t index = k;
    if (c.contains("index")) {
      if (!c["index"].is_number_unsigned() || c["index"].get<std::size_t>() >= out.size())
        return error{at + "index out of range"};
      index = c["index"].get<std::size_t>();
    }
    if (seen[index]) return error{at + "index " + std::to_string(index) + " given twice"};
    seen[index] = true;
    completion_choice& o = out[index];
    if (c.contains("text") && c["text"].is_string()) o.text = c["text"].get<std::string>();
    if (c.contains("finish_reason") && c["finish_reason"].is_string()) o.finish_reason = c["finish_reason"].get<std::string>();
    const json* lp = c.contains("logprobs") && c["logprobs"].is_object() ? &c["logprobs"] : nullptr;
    if (lp == nullptr || !lp->contains("token_logprobs") || !(*lp)["token_logprobs"].is_array())
      return error{at + "no logprobs.token_logprobs: the server returned text only (ask with \"logprobs\": 1; "
                        "the trainer needs each sampled token's log-prob)"};
    for (const auto& v : (*lp)["token_logprobs"]) {
      if (!v.is_number()) return error{at + "a log-prob that is not a number (" + clip(v.dump(), 40) + ")"};
      o.logprobs.push_back(v.get<float>());
    }
    if (c.contains("token_ids") && c["token_ids"].is_array()) {
      for (const auto& t : c["token_ids"]) {
        if (!t.is_number_integer() || t.get<long long>() < 0) return error{at + "a token id that is not an id"};
        o.tokens.push_back(t.get<std::int32_t>());
      }
    } else {
      if (!lp->contains("tokens") || !(*lp)["tokens"].is_array())
        return error{at + "no token ids: neither \"token_ids\" (option \"return_token_ids\") nor logprobs.tokens"};
      for (const auto& t : (*lp)["tokens"]) {
        auto id = token_id_of(t);
        if (!id)
          return error{at + "logprobs.tokens holds text (" + clip(t.dump(), 40) +
                       "), not ids: the server ignored \"return_tokens_as_token_ids\" (vLLM: the request option "
                       "or --return-tokens-as-token-ids) and gave no \"token_ids\" (\"return_token_ids\")"};
        o.tokens.push_back(*id);
      }
    }
    if (o.tokens.size() != o.logprobs.size())
      return error{at + std::to_string(o.tokens.size()) + " token ids but " + std::to_string(o.logprobs.size()) +
                   " log-probs"};
  }
  return out;
}

replica_pool::replica_pool(replica_pool_options o) : o_(o) {}
replica_pool::~replica_pool() = default;

result<std::shared_ptr<replica_pool>> replica_pool::make(const std::vector<std::string>& urls, replica_pool_options o) {
  if (urls.empty()) return error{"no server URL given"};
  std::shared_ptr<replica_pool> p(new replica_pool(o));
  for (const auto& u : urls) {
    auto parts = split_url(u);
    if (!parts) return parts.err();
    auto r = std::make_unique<replica>();
    r->url = u;
    r->origin = parts->first;
    r->prefix = parts->second;
    p->replicas_.push_back(std::move(r));
  }
  return p;
}

// The live replica with the fewest requests in flight, preferring one this request has not tried
// and one not resting after a failure; null when every replica is dropped.
replica_pool::replica* replica_pool::pick(const std::vector<replica*>& tried) {
  std::lock_guard lock(m_);
  const auto now = std::chrono::steady_clock::now();
  replica* best = nullptr;
  auto rank = [&](const replica* r) {
    const bool was_tried = std::find(tried.begin(), tried.end(), r) != tried.end();
    return std::make_tuple(was_tried, r->resting_until > now, r->in_flight);
  };
  for (auto& r : replicas_) {
    if (r->dropped) continue;
    if (best == nullptr || rank(r.get()) < rank(best)) best = r.get();
  }
  if (best) ++best->in_flight;
  return best;
}

void replica_pool::failed(replica& r, const std::string& why, std::chrono::steady_clock::time_point sent) {
  std::lock_guard lock(m_);
  const auto now = std::chrono::steady_clock::now();
  // The requests in flight when a replica hiccups all fail together: a request sent before the
  // last counted failure adds none, so one outage does not count as several in a row.
  if (sent < r.last_failure) return;
  r.last_failure = now;
  ++r.failures;
  r.resting_until = now + o_.backoff * (1 << std::min(r.failures, 5));
  // The last live replica is never dropped: without it every later request would fail at once;
  // it keeps being retried after its rest instead.
  const auto live = std::count_if(replicas_.begin(), replicas_.end(), [](const auto& x) { return !x->dropped; });
  if (!r.dropped && r.failures >= o_.drop_after && live > 1) {
    r.dropped = true;
    std::cerr << "openai sampler: replica " << r.url << " dropped after " << r.failures
              << " failures in a row (last: " << why << "); " << std::count_if(replicas_.begin(), replicas_.end(),
                                                                               [](const auto& x) { return !x->dropped; })
              << " left\n";
  }
}

result<std::vector<completion_choice>> replica_pool::complete(const completion_request& req, const std::string& what) {
  std::string model;
  adapter_in_use adapter;
  {
    std::lock_guard lock(m_);
    model = model_;
    adapter = adapter_;
  }
  const std::string body = completion_body(req, model, adapter);
  std::vector<replica*> tried;
  std::string last = "no replica was tried";
  auto wait = o_.backoff;
  for (int attempt = 0; attempt < o_.attempts; ++attempt) {
    if (attempt > 0) {
      std::this_thread::sleep_for(wait);
      wait = std::min(wait * 2, o_.max_backoff);
    }
    replica* r = pick(tried);
    if (r == nullptr) return error{what + "every server replica is dropped (last failure: " + last + ")"};
    tried.push_back(r);
    const auto sent = std::chrono::steady_clock::now();
    const exchange e = send(*r, o_, "POST", "/v1/completions", body);
    {
      std::lock_guard lock(m_);
      --r->in_flight;
    }
    std::string why;
    if (e.status == 0) {
      why = r->url + ": " + e.failure;
    } else if (e.status == 408 || e.status == 429) {
      // A timeout or a busy server: the request itself is fine, another try may pass.
      why = r->url + ": HTTP " + std::to_string(e.status) + ": " + error_message_of(e.body);
    } else if (e.status >= 400 && e.status < 500) {
      // Our request is at fault: another replica would refuse it the same way.
      { std::lock_guard lock(m_); r->failures = 0; }
      return error{what + r->url + " refused the request (HTTP " + std::to_string(e.status) +
                   "): " + error_message_of(e.body)};
    } else if (e.status != 200) {
      why = r->url + ": HTTP " + std::to_string(e.status) + ": " + error_message_of(e.body);
    } else {
      auto choices = parse_completion(e.body, req.n);
      if (choices) {
        std::lock_guard lock(m_);
        r->failures = 0;
        r->resting_until = {};
        ++r->answered;
        return choices;
      }
      // A body without ids is how the server is set up, not a fault of the moment: no retry.
      const std::string m = choices.message();
      if (m.find("return_token") != std::string::npos || m.find("\"logprobs\"") != std::string::npos)
        return error{what + r->url + ": " + m};
      why = r->url + ": " + m;
    }
    last = why;
    failed(*r, why, sent);
  }
  return error{what + "no replica answered after " + std::to_string(o_.attempts) + " tries (last: " + last + ")"};
}

status replica_pool::update_weights(const std::string& path, std::uint64_t version) {
  json j;
  j["model_path"] = path;
  j["weight_version"] = std::to_string(version);
  return post_to_every_replica("/update_weights_from_disk", j.dump(), "weights version " + std::to_string(version));
}

status replica_pool::load_adapter(const std::string& name, const std::string& dir, std::uint64_t version,
                                  adapter_api api) {
  const std::string base = api == adapter_api::vllm ? "/v1" : "";
  json j;
  j["lora_name"] = name;
  j["lora_path"] = dir;
  j["weight_version"] = std::to_string(version);
  if (auto s = post_to_every_replica(base + "/load_lora_adapter", j.dump(), "adapter " + name); !s) return s;
  adapter_in_use before;
  {
    std::lock_guard lock(m_);
    before = adapter_;
    adapter_ = {name, api};
  }
  if (!before.name.empty() && before.name != name)
    if (auto s = post_to_every_replica(base + "/unload_lora_adapter", json{{"lora_name", before.name}}.dump(),
                                       "unloading adapter " + before.name, /*load=*/false);
        !s)
      std::cerr << "openai sampler: " << s.message() << " (adapter " << name << " is in use)\n";
  return {};
}

status replica_pool::post_to_every_replica(const std::string& path, const std::string& body, const std::string& what,
                                           bool load) {
  std::vector<replica*> live_now;
  {
    std::lock_guard lock(m_);
    for (auto& r : replicas_)
      if (!r->dropped) live_now.push_back(r.get());
  }
  if (live_now.empty()) return error{"every server replica is dropped"};
  // All at once: a large model's reload takes a while on each server.
  std::vector<std::string> errors(live_now.size());
  std::vector<std::thread> threads;
  for (std::size_t k = 0; k < live_now.size(); ++k)
    threads.emplace_back([&, k] {
      const exchange e = send(*live_now[k], o_, "POST", path, body);
      if (e.status == 0) {
        errors[k] = live_now[k]->url + ": " + e.failure;
        return;
      }
      const auto a = json::parse(e.body, nullptr, false);
      const bool ok = e.status == 200 && a.is_object() && a.value("success", false);
      if (!ok)
        errors[k] = live_now[k]->url + ": HTTP " + std::to_string(e.status) + ": " + error_message_of(e.body);
    });
  for (auto& t : threads) t.join();
  std::string all;
  std::size_t failures = 0;
  for (const auto& e : errors)
    if (!e.empty()) {
      all += (all.empty() ? "" : "; ") + e;
      ++failures;
    }
  if (!load && failures > 0)
    return error{what + ": " + std::to_string(failures) + " of " + std::to_string(live_now.size()) +
                 " replica(s) failed: " + all};
  if (failures == live_now.size()) return error{what + " loaded nowhere: " + all};
  if (failures > 0) {
    // A replica left on older weights would serve candidates tagged with the new version: it is
    // dropped, and the version goes on with the replicas that loaded it.
    std::lock_guard lock(m_);
    for (std::size_t k = 0; k < live_now.size(); ++k)
      if (!errors[k].empty()) live_now[k]->dropped = true;
    std::cerr << "openai sampler: " << what << " not loaded by " << failures << " of " << live_now.size()
              << " replica(s), dropped: " << all << "\n";
  }
  return {};
}

status replica_pool::check_health() {
  std::vector<replica*> live_now;
  {
    std::lock_guard lock(m_);
    for (auto& r : replicas_)
      if (!r->dropped) live_now.push_back(r.get());
  }
  for (auto* r : live_now) {
    const exchange e = send(*r, o_, "GET", "/health", "");
    if (e.status == 0) return error{r->url + "/health: " + e.failure};
    if (e.status != 200) return error{r->url + "/health: HTTP " + std::to_string(e.status)};
  }
  return {};
}

result<std::string> replica_pool::served_model() {
  replica* first = nullptr;
  {
    std::lock_guard lock(m_);
    for (auto& r : replicas_)
      if (!r->dropped) {
        first = r.get();
        break;
      }
  }
  if (first == nullptr) return error{"every server replica is dropped"};
  const exchange e = send(*first, o_, "GET", "/v1/models", "");
  if (e.status == 0) return error{first->url + "/v1/models: " + e.failure};
  if (e.status != 200) return error{first->url + "/v1/models: HTTP " + std::to_string(e.status) + ": " + error_message_of(e.body)};
  const auto j = json::parse(e.body, nullptr, false);
  std::string id;
  if (j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty() && j["data"][0].is_object())
    id = j["data"][0].value("id", "");
  std::lock_guard lock(m_);
  model_ = id;
  return id;
}

std::vector<std::string> replica_pool::live() const {
  std::lock_guard lock(m_);
  std::vector<std::string> out;
  for (const auto& r : replicas_)
    if (!r->dropped) out.push_back(r->url);
  return out;
}

std::vector<std::uint64_t> replica_pool::answered() const {
  std::lock_guard lock(m_);
  std::vector<std::uint64_t> out;
  for (const auto& r : replicas_) out.push_back(r->answered);
  return out;
}

}  // namespace kforge::pipeline

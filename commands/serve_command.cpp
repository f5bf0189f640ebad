#include "commands/serve_command.hpp"

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <random>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "commands/serve_batcher.hpp"
#include "stages/chat_tokens.hpp"
#include "stages/engine_sampler.hpp"

namespace kforge::pipeline {

namespace {

using json = nlohmann::json;

// A request the server refuses, with the status and OpenAI error type and code to answer.
struct refusal {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string code;
};

void answer(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(), "application/json");
}

void answer(httplib::Response& res, const refusal& r) {
  json e = {{"message", r.message}, {"type", r.type}, {"param", nullptr}, {"code", r.code.empty() ? json(nullptr) : json(r.code)}};
  answer(res, r.status, json{{"error", e}});
}

refusal bad(std::string message, std::string code = "invalid_value") { return {400, std::move(message), "invalid_request_error", std::move(code)}; }

std::int64_t now_s() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The sampling settings every generation endpoint shares, read from a request body.
struct sampling {
  int n = 1;
  double temperature = 1.0;
  double top_p = 1.0;
  int max_tokens = 16;
  std::uint64_t seed = 0;
  batch_key::model_use use = batch_key::model_use::served;
  std::string adapter;  ///< use == adapter: the adapter's name
};

// The directory's name ("/a/b/" and "/a/b" give "b").
std::string dir_name(const std::string& dir) {
  const auto p = std::filesystem::path(dir).lexically_normal();
  return p.filename().empty() ? p.parent_path().filename().string() : p.filename().string();
}

// The optional "weight_version" of a body that changes the served weights: an integer or its digits.
std::optional<refusal> read_weight_version(const json& j, std::optional<std::uint64_t>& version) {
  if (!j.contains("weight_version") || j["weight_version"].is_null()) return std::nullopt;
  const auto& v = j["weight_version"];
  try {
    if (v.is_number_unsigned()) version = v.get<std::uint64_t>();
    else if (v.is_string()) {
      std::size_t used = 0;
      const auto s = v.get<std::string>();
      version = std::stoull(s, &used);
      if (used != s.size()) version.reset();
    }
  } catch (const std::exception&) {
    version.reset();
  }
  if (!version) return bad("\"weight_version\" must be a non-negative integer (or its digits)");
  return std::nullopt;
}

// SGLang's answer shape for a weights or adapter change that failed (success, message), with the
// OpenAI error body beside it.
void answer_not_loaded(httplib::Response& res, const std::string& message, const char* param, const char* code) {
  json body = {{"success", false}, {"message", message}};
  body["error"] = {{"message", message}, {"type", "invalid_request_error"}, {"param", param}, {"code", code}};
  answer(res, 400, body);
}

// Reads the optional numeric field `k` into `out` within [lo, hi]; a refusal names the field.
template <class T>
std::optional<refusal> read_number(const json& j, const char* k, T& out, double lo, double hi) {
  if (!j.contains(k) || j[k].is_null()) return std::nullopt;
  const auto& v = j[k];
  if constexpr (std::is_integral_v<T>) {
    if (!v.is_number_integer()) return bad(std::string("\"") + k + "\" must be an integer");
  } else {
    if (!v.is_number()) return bad(std::string("\"") + k + "\" must be a number");
  }
  const double d = v.get<double>();
  if (d < lo || d > hi)
    return bad(std::string("\"") + k + "\" must be in [" + json(lo).dump() + ", " + json(hi).dump() + "], got " + v.dump());
  if constexpr (std::is_same_v<T, std::uint64_t>) out = v.get<std::uint64_t>();
  else out = v.get<T>();
  return std::nullopt;
}

class server_state {
 public:
  // `adapter_name`: the adapter the policy holds already (--adapter), or empty.
  server_state(serve_options o, chat_tokens tokens, std::shared_ptr<engine_policy> policy, std::string name,
               std::string adapter_name)
      : o_(std::move(o)), tokens_(std::move(tokens)), policy_(std::move(policy)), name_(std::move(name)),
        batcher_(policy_, m_, batching_of(o_)) {
    if (!adapter_name.empty()) {
      std::lock_guard lock(m_);
      adapter_ = {adapter_name, o_.adapter, started_};
      batcher_.adapter_changed(adapter_name);
    }
  }

  // Answered while a generation runs (it holds the model, not these).
  void models(httplib::Response& res) {
    const batch_counts c = batcher_.counts();
    json batching = {{"generations", c.generations}, {"requests", c.requests}, {"sequences", c.sequences},
                     {"largest_batch_requests", c.largest}, {"max_batch_sequences", o_.max_batch_sequences}};
    json model = {{"id", name_}, {"object", "model"}, {"created", started_}, {"owned_by", "kforge"},
                  {"root", o_.model}, {"parent", nullptr}, {"version", version_.load()}, {"batching", batching}};
    json data = json::array({model});
    // The loaded adapter as vLLM lists one: its name, its directory as root, the base as parent.
    if (const auto a = adapter(); !a.name.empty())
      data.push_back({{"id", a.name}, {"object", "model"}, {"created", a.loaded}, {"owned_by", "kforge"},
                      {"root", a.dir}, {"parent", name_}, {"version", version_.load()}});
    json body = {{"object", "list"}, {"data", data}};
    answer(res, 200, body);
  }

  void completions(const httplib::Request& req, httplib::Response& res) {
    json j;
    if (auto r = parse(req.body, j)) return answer(res, *r);
    sampling s;
    if (auto r = select_model(j, s)) return answer(res, *r);
    std::vector<std::int32_t> prompt;
    if (auto r = read_prompt(j, prompt)) return answer(res, *r);
    if (auto r = read_sampling(j, s)) return answer(res, *r);
    int logprobs = -1;  // -1: not asked
    if (j.contains("logprobs") && !j["logprobs"].is_null()) {
      if (j["logprobs"].is_boolean()) logprobs = j["logprobs"].get<bool>() ? 1 : -1;
      else if (!j["logprobs"].is_number_integer()) return answer(res, bad("\"logprobs\" must be an integer"));
      else logprobs = j["logprobs"].get<int>();
      if (logprobs > 1)
        return answer(res, bad("\"logprobs\" may be 0 or 1: kforge serve reports the sampled token's log-prob, no alternatives"));
    }
    if (auto r = refuse_unsupported(j)) return answer(res, *r);
    const bool ids_as_tokens = j.value("return_tokens_as_token_ids", false);
    const bool return_ids = j.value("return_token_ids", false);
    auto gens = generate(prompt, s);
    if (!gens) return answer(res, generation_failed(s, gens.message()));
    json choices = json::array();
    std::size_t completion_tokens = 0;
    for (std::size_t k = 0; k < gens->size(); ++k) {
      const auto& g = (*gens)[k];
      completion_tokens += g.tokens.size();
      json c = {{"index", k}, {"text", g.text}, {"finish_reason", finish_reason(g.tokens, s.max_tokens)}};
      if (logprobs >= 0) {
        json toks = json::array(), offsets = json::array();
        std::size_t offset = 0;
        for (auto id : g.tokens) {
          const std::string piece = tokens_.decode({id});
          toks.push_back(ids_as_tokens ? "token_id:" + std::to_string(id) : piece);
          offsets.push_back(offset);
          offset += piece.size();
        }
        c["logprobs"] = {{"tokens", toks}, {"token_logprobs", g.logprobs}, {"top_logprobs", nullptr}, {"text_offset", offsets}};
      } else {
        c["logprobs"] = nullptr;
      }
      if (return_ids) {
        c["token_ids"] = g.tokens;
        c["prompt_token_ids"] = prompt;
      }
      choices.push_back(std::move(c));
    }
    answer(res, 200, json{{"id", "cmpl-" + std::to_string(++requests_)}, {"object", "text_completion"}, {"created", now_s()},
                          {"model", model_name(s)}, {"choices", choices}, {"usage", usage(prompt.size(), completion_tokens)}});
  }

  void chat(const httplib::Request& req, httplib::Response& res) {
    json j;
    if (auto r = parse(req.body, j)) return answer(res, *r);
    if (!j.contains("messages") || !j["messages"].is_array() || j["messages"].empty())
      return answer(res, bad("\"messages\" must be a non-empty array", "missing_required_parameter"));
    sampling s;
    if (auto r = select_model(j, s)) return answer(res, *r);
    const auto& msgs = j["messages"];
    // The checkpoint's chat format wraps a single user prompt (model/chat.hpp), so that is what is taken.
    if (msgs.size() != 1 || !msgs[0].is_object() || msgs[0].value("role", "") != "user" || !msgs[0].contains("content") ||
        !msgs[0]["content"].is_string())
      return answer(res, bad("kforge serve answers exactly one message {\"role\": \"user\", \"content\": \"...\"} "
                             "(the checkpoint's chat format wraps a single prompt)"));
    if (j.contains("max_completion_tokens") && !j.contains("max_tokens")) j["max_tokens"] = j["max_completion_tokens"];
    if (auto r = read_sampling(j, s)) return answer(res, *r);
    if (j.contains("logprobs") && j["logprobs"].is_boolean() && j["logprobs"].get<bool>())
      return answer(res, bad("chat completions carry no log-probs here: use /v1/completions with token ids"));
    if (auto r = refuse_unsupported(j)) return answer(res, *r);
    const auto prompt = tokens_.prompt_ids(msgs[0]["content"].get<std::string>());
    auto gens = generate(prompt, s);
    if (!gens) return answer(res, generation_failed(s, gens.message()));
    json choices = json::array();
    std::size_t completion_tokens = 0;
    for (std::size_t k = 0; k < gens->size(); ++k) {
      completion_tokens += (*gens)[k].tokens.size();
      choices.push_back({{"index", k},
                         {"message", {{"role", "assistant"}, {"content", (*gens)[k].text}}},
                         {"finish_reason", finish_reason((*gens)[k].tokens, s.max_tokens)}});
    }
    answer(res, 200, json{{"id", "chatcmpl-" + std::to_string(++requests_)}, {"object", "chat.completion"},
                          {"created", now_s()}, {"model", model_name(s)}, {"choices", choices},
                          {"usage", usage(prompt.size(), completion_tokens)}});
  }

  void update_weights(const httplib::Request& req, httplib::Response& res) {
    json j;
    if (auto r = parse(req.body, j)) return answer(res, *r);
    if (!j.contains("model_path") || !j["model_path"].is_string() || j["model_path"].get<std::string>().empty())
      return answer(res, bad("\"model_path\" (a safetensors file, or a directory holding model.safetensors) is required",
                             "missing_required_parameter"));
    std::string path = j["model_path"].get<std::string>();
    std::optional<std::uint64_t> version;
    if (auto r = read_weight_version(j, version)) return answer(res, *r);
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) path = (std::filesystem::path(path) / "model.safetensors").string();
    std::lock_guard lock(m_);
    if (auto s = policy_->load_weights_file(path); !s) return answer_not_loaded(res, s.message(), "model_path", "weights_not_loaded");
    version_ = version ? *version : version_ + 1;
    std::cout << "kforge serve: weights from " << path << ", version " << version_.load() << std::endl;
    answer(res, 200, json{{"success", true}, {"message", "loaded " + path}, {"version", version_.load()}});
  }

  // POST /load_lora_adapter {"lora_name", "lora_path", "weight_version": optional}: the adapter in
  // place of the one held (if any), between generations.
  void load_adapter(const httplib::Request& req, httplib::Response& res) {
    json j;
    if (auto r = parse(req.body, j)) return answer(res, *r);
    for (const char* k : {"lora_name", "lora_path"})
      if (!j.contains(k) || !j[k].is_string() || j[k].get<std::string>().empty())
        return answer(res, bad(std::string("\"") + k + "\" is required: {\"lora_name\": NAME, \"lora_path\": the PEFT adapter's directory}",
                               "missing_required_parameter"));
    const auto name = j["lora_name"].get<std::string>();
    const auto dir = j["lora_path"].get<std::string>();
    if (name == name_ || name == o_.model)
      return answer(res, bad("\"lora_name\" `" + name + "` is the base model's name: name the adapter otherwise"));
    std::optional<std::uint64_t> version;
    if (auto r = read_weight_version(j, version)) return answer(res, *r);
    std::lock_guard lock(m_);
    if (auto s = policy_->load_adapter(dir); !s) return answer_not_loaded(res, s.message(), "lora_path", "adapter_not_loaded");
    const auto before = adapter();
    {
      std::lock_guard a(adapter_m_);
      adapter_ = {name, dir, now_s()};
    }
    batcher_.adapter_changed(name);
    version_ = version ? *version : version_ + 1;
    std::string message = "loaded LoRA adapter " + name + " from " + dir;
    if (!before.name.empty()) message += " in place of " + before.name;
    std::cout << "kforge serve: " << message << ", version " << version_.load() << std::endl;
    answer(res, 200, json{{"success", true}, {"message", message}, {"version", version_.load()}});
  }

  // POST /unload_lora_adapter {"lora_name"}: the base model again.
  void unload_adapter(const httplib::Request& req, httplib::Response& res) {
    json j;
    if (auto r = parse(req.body, j)) return answer(res, *r);
    if (!j.contains("lora_name") || !j["lora_name"].is_string() || j["lora_name"].get<std::string>().empty())
      return answer(res, bad("\"lora_name\" (the loaded adapter's name) is required", "missing_required_parameter"));
    const auto name = j["lora_name"].get<std::string>();
    std::optional<std::uint64_t> version;
    if (auto r = read_weight_version(j, version)) return answer(res, *r);
    std::lock_guard lock(m_);
    if (const auto a = adapter(); a.name != name) return answer(res, no_adapter(name, a.name));
    if (auto s = policy_->unload_adapter(); !s) return answer_not_loaded(res, s.message(), "lora_name", "adapter_not_unloaded");
    {
      std::lock_guard a(adapter_m_);
      adapter_ = {};
    }
    batcher_.adapter_changed("");
    version_ = version ? *version : version_ + 1;
    std::cout << "kforge serve: unloaded LoRA adapter " << name << ", version " << version_.load() << std::endl;
    answer(res, 200, json{{"success", true}, {"message", "unloaded LoRA adapter " + name + ": serving the base model " + name_},
                          {"version", version_.load()}});
  }

  /// Fails the requests still queued; the generation running finishes.
  void stop_generating() { batcher_.stop(); }

 private:
  static std::optional<refusal> parse(const std::string& body, json& j) {
    j = json::parse(body, nullptr, false);
    if (j.is_discarded()) return bad("the request body is not JSON", "invalid_json");
    if (!j.is_object()) return bad("the request body must be a JSON object", "invalid_json");
    return std::nullopt;
  }

  // The loaded adapter (name empty: none).
  struct loaded_adapter {
    std::string name, dir;
    std::int64_t loaded = 0;
  };
  loaded_adapter adapter() const {
    std::lock_guard lock(adapter_m_);
    return adapter_;
  }

  refusal no_adapter(const std::string& name, const std::string& loaded) const {
    return refusal{404, "No LoRA adapter `" + name + "` is loaded (" + (loaded.empty() ? "none is" : "`" + loaded + "` is") +
                            "; the base model is `" + name_ + "`)",
                   "invalid_request_error", "model_not_found"};
  }

  // The model a request asks for: "model" (vLLM: the base's name or an adapter's) and "lora_path"
  // (SGLang: an adapter's name, which then selects; a list of one for a batch of one prompt).
  // Neither: what is served (the adapter where one is loaded). The base's name while an adapter is
  // loaded: the base model, the adapter switched off for that generation.
  std::optional<refusal> select_model(const json& j, sampling& s) const {
    const loaded_adapter a = adapter();
    const auto is_base = [&](const std::string& m) { return m == name_ || m == o_.model; };
    const auto choose = [&](const std::string& m) {
      if (a.name.empty()) return;  // no adapter: the base is what is served
      if (is_base(m)) {
        s.use = batch_key::model_use::base;
      } else {
        s.use = batch_key::model_use::adapter;
        s.adapter = a.name;
      }
    };
    std::string model;
    if (j.contains("model") && !j["model"].is_null()) {
      if (!j["model"].is_string()) return bad("\"model\" must be a string");
      model = j["model"].get<std::string>();
      if (!model.empty() && !is_base(model) && (a.name.empty() || model != a.name)) {
        std::string served = "`" + name_ + "`" + (a.name.empty() ? "" : " and its LoRA adapter `" + a.name + "`");
        return refusal{404, "The model `" + model + "` does not exist (this server serves " + served + ")",
                       "invalid_request_error", "model_not_found"};
      }
    }
    json lora = j.contains("lora_path") ? j["lora_path"] : json();
    if (lora.is_array() && lora.size() == 1) lora = lora[0];
    if (!lora.is_null()) {
      if (!lora.is_string()) return bad("\"lora_path\" must be an adapter's name (one, for one prompt)");
      const auto name = lora.get<std::string>();
      if (!is_base(name) && name != a.name && !(!a.name.empty() && name == a.dir)) return no_adapter(name, a.name);
      choose(name == a.dir ? a.name : name);
    } else if (!model.empty()) {
      choose(model);
    }
    return std::nullopt;
  }

  std::string model_name(const sampling& s) const { return s.use == batch_key::model_use::adapter ? s.adapter : name_; }

  // A generation's error: 404 where the adapter the request named went away while it waited.
  refusal generation_failed(const sampling& s, const std::string& message) const {
    if (s.use == batch_key::model_use::adapter && adapter().name != s.adapter) return no_adapter(s.adapter, adapter().name);
    return refusal{500, message, "server_error", "generation_failed"};
  }

  std::optional<refusal> read_prompt(const json& j, std::vector<std::int32_t>& out) const {
    if (!j.contains("prompt")) return bad("\"prompt\" is required", "missing_required_parameter");
    json p = j["prompt"];
    // A batch of one prompt is that prompt; more are refused rather than half answered.
    if (p.is_array() && p.size() == 1 && (p[0].is_string() || p[0].is_array())) p = p[0];
    if (p.is_string()) {
      out = tokens_.encode(p.get<std::string>());
    } else if (p.is_array()) {
      for (const auto& t : p) {
        if (!t.is_number_integer())
          return bad("\"prompt\" must be a string or a list of token ids (one prompt per request)");
        const auto id = t.get<long long>();
        if (id < 0 || id >= tokens_.vocab_size())
          return bad("prompt token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                     std::to_string(tokens_.vocab_size()) + ")");
        out.push_back(static_cast<std::int32_t>(id));
      }
    } else {
      return bad("\"prompt\" must be a string or a list of token ids");
    }
    if (out.empty()) return bad("the prompt is empty");
    return std::nullopt;
  }

  std::optional<refusal> read_sampling(const json& j, sampling& s) const {
    if (auto r = read_number(j, "n", s.n, 1, 1024)) return r;
    if (auto r = read_number(j, "temperature", s.temperature, 0, 100)) return r;
    if (auto r = read_number(j, "top_p", s.top_p, 0, 1)) return r;
    if (s.top_p <= 0) return bad("\"top_p\" must be above 0");
    if (auto r = read_number(j, "max_tokens", s.max_tokens, 1, o_.max_tokens)) return r;
    if (j.contains("seed") && !j["seed"].is_null()) {
      if (!j["seed"].is_number_integer()) return bad("\"seed\" must be an integer");
      s.seed = j["seed"].is_number_unsigned() ? j["seed"].get<std::uint64_t>()
                                              : static_cast<std::uint64_t>(j["seed"].get<std::int64_t>());
    } else {
      s.seed = std::random_device{}();
    }
    return std::nullopt;
  }

  static std::optional<refusal> refuse_unsupported(const json& j) {
    if (j.value("stream", false)) return bad("\"stream\" is not supported by kforge serve", "unsupported_parameter");
    if (j.value("echo", false)) return bad("\"echo\" is not supported by kforge serve", "unsupported_parameter");
    if (j.contains("stop") && !j["stop"].is_null() && !(j["stop"].is_array() && j["stop"].empty()))
      return bad("stop strings are not supported by kforge serve: generation stops at the checkpoint's end tokens",
                 "unsupported_parameter");
    return std::nullopt;
  }

  // Through the batcher: requests waiting together with these settings share one generation.
  result<std::vector<engine_policy::continuation>> generate(const std::vector<std::int32_t>& prompt, const sampling& s) {
    return batcher_.generate(prompt, s.seed, batch_key{s.n, s.temperature, s.top_p, s.max_tokens, s.use, s.adapter});
  }

  static batcher_options batching_of(const serve_options& o) {
    batcher_options b;
    b.max_sequences = static_cast<std::size_t>(o.max_batch_sequences);
    b.gather = std::chrono::milliseconds(o.batch_wait_ms);
    b.gather_limit = 10 * b.gather;
    return b;
  }

  std::string finish_reason(const std::vector<std::int32_t>& t, int max_tokens) const {
    const auto& stops = tokens_.stops();
    if (!t.empty() && std::find(stops.begin(), stops.end(), t.back()) != stops.end()) return "stop";
    return static_cast<int>(t.size()) >= max_tokens ? "length" : "stop";
  }

  static json usage(std::size_t prompt, std::size_t completion) {
    return {{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion}};
  }

  serve_options o_;
  chat_tokens tokens_;
  std::shared_ptr<engine_policy> policy_;
  std::string name_;
  std::mutex m_;  ///< the model: generations (the batcher holds it), weight and adapter loads
  mutable std::mutex adapter_m_;  ///< adapter_, read by request handlers; written with m_ held too
  loaded_adapter adapter_;
  std::atomic<std::uint64_t> version_{0};
  std::atomic<std::uint64_t> requests_{0};
  std::int64_t started_ = now_s();
  serve_batcher batcher_;  ///< last: its worker uses the members above
};

// Wraps a handler so that an exception is a 500 with an OpenAI error body, not a dropped connection.
template <class F>
httplib::Server::Handler guarded(F f) {
  return [f](const httplib::Request& req, httplib::Response& res) {
    try {
      f(req, res);
    } catch (const std::exception& e) {
      answer(res, refusal{500, std::string("internal error: ") + e.what(), "server_error", "internal_error"});
    }
  };
}

}  // namespace

int serve_command(const serve_options& o, std::ostream& out, std::ostream& err) {
  auto tokens = chat_tokens::load(o.model, o.tokenizer);
  if (!tokens) {
    err << "kforge serve: " << tokens.message() << "\n";
    return 1;
  }
  engine_sampler_options eo;
  eo.sampler.model = o.model;
  eo.tokenizer_dir = o.tokenizer;
  eo.device = o.gpu;
  auto policy = load_engine_policy(eo);
  if (!policy) {
    err << "kforge serve: " << policy.message() << "\n";
    return 1;
  }
  if (o.max_tokens < 1) {
    err << "kforge serve: --max-tokens must be at least 1\n";
    return 2;
  }
  if (o.max_batch_sequences < 1 || o.batch_wait_ms < 0) {
    err << "kforge serve: --max-batch-sequences must be at least 1 and --batch-wait-ms at least 0\n";
    return 2;
  }
  const std::string name = o.served_name.empty() ? dir_name(o.model) : o.served_name;
  std::string adapter_name;
  if (!o.adapter.empty()) {
    adapter_name = o.adapter_name.empty() ? dir_name(o.adapter) : o.adapter_name;
    if (adapter_name.empty() || adapter_name == name || adapter_name == o.model) {
      err << "kforge serve: the adapter's name `" << adapter_name << "` is empty or the base model's: give --adapter-name\n";
      return 2;
    }
    if (auto s = (*policy)->load_adapter(o.adapter); !s) {
      err << "kforge serve: --adapter " << o.adapter << ": " << s.message() << "\n";
      return 1;
    }
  } else if (!o.adapter_name.empty()) {
    err << "kforge serve: --adapter-name without --adapter\n";
    return 2;
  }
  server_state state(o, std::move(*tokens), std::move(*policy), name, adapter_name);

  // SIGINT and SIGTERM go to one waiting thread that stops the server: the server's own threads,
  // started after this, inherit the blocked mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  httplib::Server svr;
  // Every request of a batch holds a handler thread while it waits, and the next batch gathers
  // while one runs: threads for two full batches of one-sequence requests, and a few to spare
  // (httplib's default, about one per core, would cap a batch at that many requests).
  const std::size_t wanted = 2 * static_cast<std::size_t>(o.max_batch_sequences) + 4;
  const auto threads = std::clamp<std::size_t>(wanted, CPPHTTPLIB_THREAD_POOL_COUNT, 1024);
  svr.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  svr.Get("/health", [](const httplib::Request&, httplib::Response& res) { answer(res, 200, json{{"status", "ok"}}); });
  svr.Get("/v1/models", guarded([&](const httplib::Request&, httplib::Response& res) { state.models(res); }));
  svr.Post("/v1/completions", guarded([&](const httplib::Request& q, httplib::Response& res) { state.completions(q, res); }));
  svr.Post("/v1/chat/completions", guarded([&](const httplib::Request& q, httplib::Response& res) { state.chat(q, res); }));
  svr.Post("/update_weights_from_disk",
           guarded([&](const httplib::Request& q, httplib::Response& res) { state.update_weights(q, res); }));
  // SGLang's paths and vLLM's (/v1/..., VLLM_ALLOW_RUNTIME_LORA_UPDATING there).
  for (const char* path : {"/load_lora_adapter", "/v1/load_lora_adapter"})
    svr.Post(path, guarded([&](const httplib::Request& q, httplib::Response& res) { state.load_adapter(q, res); }));
  for (const char* path : {"/unload_lora_adapter", "/v1/unload_lora_adapter"})
    svr.Post(path, guarded([&](const httplib::Request& q, httplib::Response& res) { state.unload_adapter(q, res); }));
  svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    const bool missing = res.status == 404;
    answer(res, refusal{res.status, missing ? "no such endpoint: " + req.method + " " + req.path
                                             : "HTTP " + std::to_string(res.status) + " for " + req.method + " " + req.path,
                        "invalid_request_error", missing ? "unknown_url" : ""});
  });

  const int port = o.port == 0 ? svr.bind_to_any_port(o.host) : (svr.bind_to_port(o.host, o.port) ? o.port : -1);
  if (port < 0) {
    err << "kforge serve: cannot listen on " << o.host << ":" << o.port << " (in use, or not an address here)\n";
    return 1;
  }
  std::atomic<bool> signalled{false};
  std::thread stopper([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    signalled = true;
    state.stop_generating();
    svr.stop();
  });
  out << "kforge serve: listening on http://" << o.host << ":" << port << " (model " << o.model
      << (adapter_name.empty() ? "" : ", LoRA adapter " + adapter_name + " from " + o.adapter) << "; batches of up to "
      << o.max_batch_sequences << " sequences)" << std::endl;
  const bool ok = svr.listen_after_bind();
  // The stopper may still wait (listening failed): wake it.
  if (!signalled) pthread_kill(stopper.native_handle(), SIGTERM);
  stopper.join();
  out << "kforge serve: stopped" << std::endl;
  return ok ? 0 : 1;
}

}  // namespace kforge::pipeline

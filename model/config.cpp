#include "model/config.hpp"

#include "common/text_file.hpp"
#include "model/json_object.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace kforge::model {
namespace {

using json = nlohmann::json;

struct reader {
  const json& j;
  const std::string& source;

  error fail(const std::string& field, const std::string& why) const {
    return error{source + ": " + field + ": " + why};
  }
  // A required positive integer.
  result<std::int64_t> positive(const char* field) const {
    if (!j.contains(field)) return fail(field, "missing");
    const json& v = j[field];
    if (!v.is_number_integer() || v.get<std::int64_t>() <= 0) return fail(field, "must be a positive integer");
    return v.get<std::int64_t>();
  }
  result<std::optional<std::int64_t>> optional_positive(const char* field) const {
    if (!j.contains(field) || j[field].is_null()) return std::optional<std::int64_t>{};
    auto r = positive(field);
    if (!r) return r.err();
    return std::optional<std::int64_t>{r.value()};
  }
  result<double> positive_number(const json& obj, const char* field, double fallback, bool required) const {
    if (!obj.contains(field) || obj[field].is_null()) {
      if (required) return fail(field, "missing");
      return fallback;
    }
    if (!obj[field].is_number() || obj[field].get<double>() <= 0) return fail(field, "must be a positive number");
    return obj[field].get<double>();
  }
  result<bool> boolean(const char* field, bool fallback) const {
    if (!j.contains(field) || j[field].is_null()) return fallback;
    if (!j[field].is_boolean()) return fail(field, "must be true or false");
    return j[field].get<bool>();
  }
  result<std::vector<std::int64_t>> token_ids(const char* field) const {
    std::vector<std::int64_t> out;
    if (!j.contains(field) || j[field].is_null()) return out;
    const json& v = j[field];
    if (v.is_number_integer()) {
      out.push_back(v.get<std::int64_t>());
    } else if (v.is_array()) {
      for (const auto& e : v) {
        if (!e.is_number_integer()) return fail(field, "must be an integer or a list of integers");
        out.push_back(e.get<std::int64_t>());
      }
    } else {
      return fail(field, "must be an integer or a list of integers");
    }
    return out;
  }
};

#define KF_TRY(var, expr)          \
  auto var##_r = (expr);           \
  if (!var##_r) return var##_r.err(); \
  auto var = std::move(var##_r.value())

}  // namespace

result<model_config> parse_model_config(std::string_view json_text, const std::string& source) {
  auto parsed = parse_json_object(json_text, source);
  if (!parsed) return error{parsed.err().message};
  const json j = std::move(*parsed);
  reader r{j, source};
  model_config c;

  if (!j.contains("architectures") || !j["architectures"].is_array() || j["architectures"].empty())
    return r.fail("architectures", "missing or empty (expected [\"Qwen2ForCausalLM\"] or [\"LlamaForCausalLM\"])");
  if (j["architectures"].size() != 1 || !j["architectures"][0].is_string())
    return r.fail("architectures", "must name exactly one architecture");
  c.architecture_name = j["architectures"][0].get<std::string>();
  if (c.architecture_name == "Qwen2ForCausalLM") {
    c.arch = architecture::qwen2;
  } else if (c.architecture_name == "LlamaForCausalLM") {
    c.arch = architecture::llama;
  } else {
    return r.fail("architectures", "unsupported architecture '" + c.architecture_name +
                                       "' (supported: Qwen2ForCausalLM, LlamaForCausalLM)");
  }

  KF_TRY(hidden, r.positive("hidden_size"));
  KF_TRY(inter, r.positive("intermediate_size"));
  KF_TRY(layers, r.positive("num_hidden_layers"));
  KF_TRY(heads, r.positive("num_attention_heads"));
  KF_TRY(kv, r.optional_positive("num_key_value_heads"));
  KF_TRY(head_dim, r.optional_positive("head_dim"));
  KF_TRY(vocab, r.positive("vocab_size"));
  KF_TRY(max_pos, r.positive("max_position_embeddings"));
  c.hidden_size = hidden;
  c.intermediate_size = inter;
  c.num_hidden_layers = layers;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv.value_or(heads);
  c.vocab_size = vocab;
  c.max_position_embeddings = max_pos;
  if (head_dim) {
    c.head_dim = *head_dim;
  } else {
    if (hidden % heads != 0)
      return r.fail("hidden_size", "not divisible by num_attention_heads (" + std::to_string(heads) + ")");
    c.head_dim = hidden / heads;
  }
  if (c.head_dim % 2 != 0) return r.fail("head_dim", "must be even for rotary embeddings");
  if (heads % c.num_key_value_heads != 0)
    return r.fail("num_key_value_heads", "must divide num_attention_heads (" + std::to_string(heads) + ")");

  KF_TRY(eps, r.positive_number(j, "rms_norm_eps", 1e-6, true));
  c.rms_norm_eps = eps;

  // Rotary: transformers 5 writes rope_parameters {rope_theta, rope_type}; 4.x writes rope_theta and
  // rope_scaling. Only the default (unscaled) rotary embedding is implemented.
  const json* rope_params = nullptr;
  if (j.contains("rope_parameters") && !j["rope_parameters"].is_null()) {
    if (!j["rope_parameters"].is_object()) return r.fail("rope_parameters", "must be an object");
    rope_params = &j["rope_parameters"];
  }
  for (const char* field : {"rope_scaling", "rope_parameters"}) {
    if (!j.contains(field) || j[field].is_null()) continue;
    const json& s = j[field];
    if (!s.is_object()) return r.fail(field, "must be an object or null");
    for (const char* key : {"rope_type", "type"}) {
      if (s.contains(key) && !(s[key].is_string() && s[key].get<std::string>() == "default"))
        return r.fail(std::string(field) + "." + key,
                      "rotary scaling '" + s[key].dump() + "' is not supported (only \"default\")");
    }
  }
  if (rope_params != nullptr && rope_params->contains("rope_theta")) {
    reader rp{*rope_params, source};
    KF_TRY(theta, rp.positive_number(*rope_params, "rope_theta", 10000.0, true));
    c.rope_theta = theta;
  } else {
    KF_TRY(theta, r.positive_number(j, "rope_theta", 10000.0, false));
    c.rope_theta = theta;
  }

  if (j.contains("hidden_act") && !(j["hidden_act"].is_string() && j["hidden_act"].get<std::string>() == "silu"))
    return r.fail("hidden_act", "only \"silu\" is supported, got " + j["hidden_act"].dump());
  KF_TRY(tie, r.boolean("tie_word_embeddings", false));
  c.tie_word_embeddings = tie;

  if (c.arch == architecture::qwen2) {
    c.qkv_bias = true;
    KF_TRY(sliding, r.boolean("use_sliding_window", false));
    if (sliding) return r.fail("use_sliding_window", "sliding-window attention is not supported");
  } else {
    KF_TRY(bias, r.boolean("attention_bias", false));
    c.qkv_bias = bias;
    c.o_bias = bias;
    KF_TRY(mlp_bias, r.boolean("mlp_bias", false));
    if (mlp_bias) return r.fail("mlp_bias", "MLP bias is not supported");
    if (j.contains("pretraining_tp") && j["pretraining_tp"].is_number_integer() &&
        j["pretraining_tp"].get<std::int64_t>() != 1)
      return r.fail("pretraining_tp", "only 1 is supported");
  }
  for (const char* field : {"torch_dtype", "dtype"}) {
    if (j.contains(field) && j[field].is_string()) c.torch_dtype = j[field].get<std::string>();
  }
  KF_TRY(bos, r.token_ids("bos_token_id"));
  KF_TRY(eos, r.token_ids("eos_token_id"));
  c.bos_token_ids = bos;
  c.eos_token_ids = eos;
  return c;
}

result<model_config> load_model_config(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string file = fs::is_directory(path, ec) ? (fs::path(path) / "config.json").string() : path;
  auto text = read_text_file(file);
  if (!text) return text.err();
  return parse_model_config(*text, file);
}

result<std::size_t> turn_context_limit(const model_config& c, std::int64_t max_new_tokens) {
  if (c.max_position_embeddings <= max_new_tokens)
    return error{"a turn of " + std::to_string(max_new_tokens) + " new tokens leaves no room for a prompt in the model's context of " +
                 std::to_string(c.max_position_embeddings) + " tokens"};
  return static_cast<std::size_t>(c.max_position_embeddings - max_new_tokens);
}

}  // namespace kforge::model

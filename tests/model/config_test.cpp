#include "model/config.hpp"

#include <doctest/doctest.h>

#include <functional>

#include <nlohmann/json.hpp>

#include "tests/model/test_files.hpp"

using namespace kforge::model;
using namespace kforge::model::testing;
using json = nlohmann::json;

namespace {
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::string with(const std::string& file, const std::function<void(json&)>& edit) {
  json j = json::parse(read_text(fixtures(file)));
  edit(j);
  return j.dump();
}
}  // namespace

TEST_CASE("config: the Qwen2 and Llama fixtures (transformers 5 form)") {
  auto q = load_model_config(fixtures("qwen2"));
  REQUIRE_MESSAGE(q.ok(), (q.ok() ? "" : q.message()));
  CHECK(q->arch == architecture::qwen2);
  CHECK(q->hidden_size == 64);
  CHECK(q->intermediate_size == 128);
  CHECK(q->num_hidden_layers == 2);
  CHECK(q->num_attention_heads == 4);
  CHECK(q->num_key_value_heads == 2);
  CHECK(q->head_dim == 16);
  CHECK(q->vocab_size == 512);
  CHECK(q->max_position_embeddings == 256);
  CHECK(q->rms_norm_eps == doctest::Approx(1e-6));
  CHECK(q->rope_theta == doctest::Approx(10000.0));
  CHECK(q->tie_word_embeddings);
  CHECK(q->qkv_bias);
  CHECK_FALSE(q->o_bias);
  CHECK(q->torch_dtype == "float32");
  CHECK(q->eos_token_ids == std::vector<std::int64_t>{2});

  auto l = load_model_config(fixtures("llama/config.json"));
  REQUIRE(l.ok());
  CHECK(l->arch == architecture::llama);
  CHECK(l->num_attention_heads == 8);
  CHECK(l->head_dim == 8);
  CHECK(l->rope_theta == doctest::Approx(500000.0));
  CHECK_FALSE(l->tie_word_embeddings);
  CHECK_FALSE(l->qkv_bias);
}

TEST_CASE("config: the transformers 4 form (rope_theta at top level)") {
  auto text = with("qwen2/config.json", [](json& j) {
    j.erase("rope_parameters");
    j["rope_theta"] = 1000000.0;
    j["rope_scaling"] = nullptr;
    j["eos_token_id"] = json::array({2, 3});
  });
  auto c = parse_model_config(text, "c.json");
  REQUIRE_MESSAGE(c.ok(), (c.ok() ? "" : c.message()));
  CHECK(c->rope_theta == doctest::Approx(1e6));
  CHECK(c->eos_token_ids == std::vector<std::int64_t>{2, 3});
}

TEST_CASE("config: errors name the file and the field") {
  auto bad_json = parse_model_config("{\"hidden_size\": ", "x/config.json");
  REQUIRE_FALSE(bad_json.ok());
  CHECK(contains(bad_json.message(), "x/config.json"));
  CHECK(contains(bad_json.message(), "not valid JSON"));

  auto unknown = parse_model_config(with("qwen2/config.json", [](json& j) { j["architectures"] = {"MistralForCausalLM"}; }), "c.json");
  REQUIRE_FALSE(unknown.ok());
  CHECK(contains(unknown.message(), "architectures"));
  CHECK(contains(unknown.message(), "MistralForCausalLM"));

  auto none = parse_model_config(with("qwen2/config.json", [](json& j) { j.erase("architectures"); }), "c.json");
  CHECK_FALSE(none.ok());

  auto missing = parse_model_config(with("llama/config.json", [](json& j) { j.erase("hidden_size"); }), "c.json");
  REQUIRE_FALSE(missing.ok());
  CHECK(contains(missing.message(), "c.json: hidden_size: missing"));

  auto negative = parse_model_config(with("llama/config.json", [](json& j) { j["num_hidden_layers"] = -1; }), "c.json");
  REQUIRE_FALSE(negative.ok());
  CHECK(contains(negative.message(), "num_hidden_layers"));

  auto gqa = parse_model_config(with("llama/config.json", [](json& j) { j["num_key_value_heads"] = 3; }), "c.json");
  REQUIRE_FALSE(gqa.ok());
  CHECK(contains(gqa.message(), "num_key_value_heads"));

  auto scaled = parse_model_config(with("llama/config.json", [](json& j) {
    j["rope_parameters"] = {{"rope_type", "llama3"}, {"rope_theta", 500000.0}, {"factor", 8.0}};
  }), "c.json");
  REQUIRE_FALSE(scaled.ok());
  CHECK(contains(scaled.message(), "rope_parameters.rope_type"));

  auto act = parse_model_config(with("qwen2/config.json", [](json& j) { j["hidden_act"] = "gelu"; }), "c.json");
  REQUIRE_FALSE(act.ok());
  CHECK(contains(act.message(), "hidden_act"));

  auto sliding = parse_model_config(with("qwen2/config.json", [](json& j) { j["use_sliding_window"] = true; }), "c.json");
  CHECK_FALSE(sliding.ok());

  auto absent = load_model_config("/nonexistent/dir");
  REQUIRE_FALSE(absent.ok());
  CHECK(contains(absent.message(), "/nonexistent/dir"));
}

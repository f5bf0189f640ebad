#pragma once
// What the model benches share: a random Qwen2 checkpoint in a given shape (Qwen2.5-0.5B's by
// default), written the way transformers initialises one, and the median/min/max of repeated runs.
// Includes LibTorch (model/weights.hpp).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <nlohmann/json.hpp>

#include "model/config.hpp"
#include "model/weights.hpp"

namespace kforge::bench {

using json = nlohmann::json;

struct shape {  // Qwen2.5-0.5B's, by default
  std::int64_t hidden = 896, layers = 24, heads = 14, kv_heads = 2, intermediate = 4864, vocab = 151936;
  std::int64_t bos = 151643, eos = 151643;
};

struct spread {
  double median = 0, min = 0, max = 0;
  static spread of(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return {n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2, v.front(), v.back()};
  }
  json to_json() const { return {{"median", median}, {"min", min}, {"max", max}}; }
};

inline json config_json(const shape& s) {
  return {{"architectures", {"Qwen2ForCausalLM"}},
          {"model_type", "qwen2"},
          {"hidden_size", s.hidden},
          {"intermediate_size", s.intermediate},
          {"num_hidden_layers", s.layers},
          {"num_attention_heads", s.heads},
          {"num_key_value_heads", s.kv_heads},
          {"vocab_size", s.vocab},
          {"max_position_embeddings", 32768},
          {"rms_norm_eps", 1e-6},
          {"rope_theta", 1000000.0},  // transformers 4.x reads this, 5.x rope_parameters
          {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 1000000.0}}},
          {"tie_word_embeddings", true},
          {"hidden_act", "silu"},
          {"attention_dropout", 0.0},
          {"initializer_range", 0.02},
          {"use_sliding_window", false},
          {"sliding_window", nullptr},
          {"max_window_layers", s.layers},
          {"use_cache", true},
          {"bos_token_id", s.bos},
          {"eos_token_id", s.eos},
          {"torch_dtype", "bfloat16"}};
}

// A checkpoint directory of random weights in `s`'s shape, the way transformers initialises them.
/// DIR/config.json in shape `s` and random bf16 weights (normal, std 0.02; norms 1; biases 0) as a
/// Hugging Face checkpoint directory.
inline kforge::status write_random_checkpoint(const shape& s, const std::string& dir) {
  std::ofstream(std::filesystem::path(dir) / "config.json") << config_json(s).dump(2) << "\n";
  auto config = model::load_model_config(dir);
  if (!config) return config.err();
  model::CausalLM lm(config.value());
  {
    at::NoGradGuard no_grad;
    at::Generator gen = at::detail::createCPUGenerator(1234);
    for (auto& p : lm->named_parameters(true)) {
      if (p.key().find("norm") != std::string::npos) p.value().fill_(1.0);
      else if (p.key().find(".bias") != std::string::npos) p.value().zero_();
      else p.value().normal_(0.0, 0.02, gen);
    }
  }
  lm->to(at::kBFloat16);
  return model::save_checkpoint(*lm, dir, dir);
}

}  // namespace kforge::bench

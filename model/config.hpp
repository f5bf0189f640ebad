#pragma once
// A Hugging Face `config.json` for the architectures the policy model implements: Qwen2
// (Qwen2ForCausalLM: q/k/v bias) and Llama (LlamaForCausalLM: no bias unless attention_bias).
// Both the transformers 4.x form (rope_theta, rope_scaling) and the 5.x form (rope_parameters)
// are read. Anything the model would compute differently (another architecture, an activation other
// than silu, rope scaling, sliding-window attention, MLP bias) is an error naming the field, never a
// silently different model.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.hpp"

namespace kforge::model {

enum class architecture { qwen2, llama };

/// The fields of config.json the model needs, checked for consistency.
struct model_config {
  architecture arch = architecture::qwen2;
  std::string architecture_name;       ///< e.g. "Qwen2ForCausalLM"
  std::int64_t hidden_size = 0;
  std::int64_t intermediate_size = 0;
  std::int64_t num_hidden_layers = 0;
  std::int64_t num_attention_heads = 0;
  std::int64_t num_key_value_heads = 0;  ///< defaults to num_attention_heads when absent
  std::int64_t head_dim = 0;             ///< config's head_dim, else hidden_size / num_attention_heads
  std::int64_t vocab_size = 0;
  std::int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;                 ///< q_proj, k_proj, v_proj carry a bias
  bool o_bias = false;                   ///< o_proj carries a bias (Llama attention_bias)
  std::string torch_dtype;               ///< "float32", "bfloat16", ... or empty
  std::vector<std::int64_t> bos_token_ids;
  std::vector<std::int64_t> eos_token_ids;
};

/// Parses config.json text; `source` (the file) prefixes every error.
[[nodiscard]] result<model_config> parse_model_config(std::string_view json_text, const std::string& source);

/// Reads `path`, a config.json or a checkpoint directory holding one.
[[nodiscard]] result<model_config> load_model_config(const std::string& path);

/// The longest context an episode's next turn may start from: the checkpoint's
/// max_position_embeddings less one turn of `max_new_tokens` (positions past what the model was
/// trained on give it nothing to go by). An error when no room is left for a prompt.
[[nodiscard]] result<std::size_t> turn_context_limit(const model_config& c, std::int64_t max_new_tokens);

}  // namespace kforge::model

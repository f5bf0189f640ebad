#pragma once
// The Qwen2 / Llama decoder in LibTorch modules, computing what Hugging Face transformers computes
// (its eager attention): RMSNorm with the product taken in the input dtype after an fp32
// normalisation, rotary embeddings with the rotate_half convention, grouped-query attention with
// the softmax in fp32, a SwiGLU MLP, and a tied or untied lm_head.
//
// Parameters are registered under Hugging Face's names, so `named_parameters()` of a CausalLM reads
// "model.layers.0.self_attn.q_proj.weight", ... and weights.hpp loads and saves checkpoints by name.
//
// Two training options hang on the modules: LoRA adapters on projections (model/lora.hpp) and
// recomputing each decoder layer in backward instead of keeping its activations
// (TransformerImpl::checkpoint_layers, model/layer_checkpoint.hpp).
// Includes LibTorch: only the model's torch TUs and their users include this header.

#include <cstdint>
#include <memory>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "model/config.hpp"

namespace kforge::model {

struct lora_adapter;  // model/lora.hpp
struct lora_state;

/// Keys and values of every layer for a batch, preallocated to a capacity: [B, kv_heads, capacity,
/// head_dim] each. The first `length` positions are filled; forward() appends after them.
struct kv_cache {
  std::vector<at::Tensor> k;
  std::vector<at::Tensor> v;
  std::int64_t length = 0;

  std::int64_t capacity() const { return k.empty() ? 0 : k.front().size(2); }
  std::int64_t batch() const { return k.empty() ? 0 : k.front().size(0); }
};

/// An empty cache for `batch` rows of up to `capacity` positions, in `options`' dtype and device.
kv_cache make_kv_cache(const model_config& config, std::int64_t batch, std::int64_t capacity,
                       const at::TensorOptions& options);

/// Bytes of attention scratch per (query, key) pair of one row in a forward of `dtype` on a CUDA
/// device or not: the [B, T, S] masks forward builds (bool and additive) and, per layer, what the
/// attention makes of them (SDPA's mask folded over the query heads of a key/value head on CUDA;
/// scores, softmax and probabilities elsewhere). It grows with the square of the sequence, so it,
/// not the KV cache, bounds a long prefill (generate.hpp's prefill_scratch_bytes).
std::int64_t attention_bytes_per_pair(const model_config& config, at::ScalarType dtype, bool cuda);

/// cos and sin tables [B, T, head_dim] for positions [B, T] (HF's default rotary embedding).
struct rotary_tables {
  at::Tensor cos;
  at::Tensor sin;
};
rotary_tables make_rotary(const at::Tensor& positions, std::int64_t head_dim, double theta,
                          at::ScalarType dtype);

/// RMSNorm: weight * (x / sqrt(mean(x^2) + eps)), normalised in fp32.
class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(std::int64_t dim, double eps);
  at::Tensor forward(const at::Tensor& x);

  at::Tensor weight;
  double eps;
};
TORCH_MODULE(RMSNorm);

/// Grouped-query self-attention with rotary embeddings (q_proj, k_proj, v_proj, o_proj).
class AttentionImpl : public torch::nn::Module {
 public:
  explicit AttentionImpl(const model_config& config);
  /// x [B, T, hidden]; additive mask [B, 1, T, S] over the S = past + T keys. With a cache the new
  /// keys and values are written to positions [past, past + T) of `k_cache`/`v_cache`.
  at::Tensor forward(const at::Tensor& x, const rotary_tables& rope, const at::Tensor& mask,
                     at::Tensor* k_cache, at::Tensor* v_cache, std::int64_t past);

  torch::nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  /// LoRA adapters of the projections (model/lora.hpp); null: none.
  std::shared_ptr<lora_adapter> q_lora, k_lora, v_lora, o_lora;
  std::int64_t heads, kv_heads, head_dim;
};
TORCH_MODULE(Attention);

/// down_proj(silu(gate_proj(x)) * up_proj(x)).
class MLPImpl : public torch::nn::Module {
 public:
  explicit MLPImpl(const model_config& config);
  at::Tensor forward(const at::Tensor& x);

  torch::nn::Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
  /// LoRA adapters of the projections (model/lora.hpp); null: none.
  std::shared_ptr<lora_adapter> gate_lora, up_lora, down_lora;
};
TORCH_MODULE(MLP);

class DecoderLayerImpl : public torch::nn::Module {
 public:
  explicit DecoderLayerImpl(const model_config& config);
  at::Tensor forward(const at::Tensor& x, const rotary_tables& rope, const at::Tensor& mask,
                     at::Tensor* k_cache, at::Tensor* v_cache, std::int64_t past);

  Attention self_attn{nullptr};
  MLP mlp{nullptr};
  RMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
};
TORCH_MODULE(DecoderLayer);

/// What a forward pass sees besides the token ids.
struct forward_args {
  /// [B, past + T]: 1 for tokens, 0 for padding (Hugging Face's attention_mask). Undefined: all
  /// tokens. With a cache it covers the cached positions too.
  at::Tensor attention_mask;
  /// [B, T] rotary positions. Undefined: cumsum(attention_mask) - 1 when there is a mask (so left
  /// padding does not shift positions), else past .. past + T - 1.
  at::Tensor positions;
  /// Appended to, and attended over, when given; its length grows by T.
  kv_cache* cache = nullptr;
  /// Logits of the last position only ([B, 1, V]), as generation needs.
  bool last_only = false;
};

/// The decoder stack ("model." in Hugging Face names): embed_tokens, layers, norm.
class TransformerImpl : public torch::nn::Module {
 public:
  explicit TransformerImpl(const model_config& config);
  /// Final hidden states [B, T, hidden].
  at::Tensor forward(const at::Tensor& ids, const forward_args& args);

  torch::nn::Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};
  RMSNorm norm{nullptr};
  model_config config;
  /// Activation checkpointing: while gradients are recorded and no KV cache is given, each layer
  /// keeps only its input for backward and is run again there (model/layer_checkpoint.hpp). The
  /// same gradients for a fraction of the activation memory, at the cost of a second forward.
  bool checkpoint_layers = false;
};
TORCH_MODULE(Transformer);

/// Qwen2ForCausalLM / LlamaForCausalLM.
class CausalLMImpl : public torch::nn::Module {
 public:
  explicit CausalLMImpl(const model_config& config);
  /// ids [B, T] (int64) -> logits [B, T, V] (or [B, 1, V] with last_only) in the weights' dtype.
  at::Tensor forward(const at::Tensor& ids, const forward_args& args = {});
  /// The output projection: lm_head's weight, or the embedding's when tied.
  at::Tensor output_weight() const;

  Transformer model{nullptr};
  torch::nn::Linear lm_head{nullptr};  ///< null when tie_word_embeddings
  model_config config;
  /// Its LoRA adapters and their on/off switch (model/lora.hpp); null: none.
  std::shared_ptr<lora_state> lora;
};
TORCH_MODULE(CausalLM);

}  // namespace kforge::model

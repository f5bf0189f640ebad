#pragma once
// LoRA adapters on the decoder's projections: y = W x + scale * B A dropout(x), with A [rank, in]
// drawn as nn.Linear's default init (uniform in ±1/sqrt(in)), B [out, rank] zero (so a fresh
// adapter changes nothing) and scale = alpha / rank, as Hugging Face PEFT computes it.
//
// attach_lora() puts an adapter on the chosen projections of every layer and freezes every base
// parameter (requires_grad false): lora_parameters() are then all the model trains. The adapters
// are not registered as module parameters, so named_parameters(), load_weights and the weight
// broadcast keep the base model's layout; save_weights writes the merged weights (W + scale B A),
// so a sampler or transformers loads a trained model as a plain one.
//
// The KL reference of LoRA training is the same model with its adapters switched off
// (lora_disabled): no second copy of the weights.
//
// Adapters are kept in fp32 (fp64 on an fp64 model) whatever the base's dtype: on a bf16 base the
// adapter's product runs on bf16 casts of A and B, and their gradients land in fp32 A and B, so the
// optimiser steps fp32 master adapters while the frozen base stays bf16.
//
// Export and import in the PEFT layout that transformers, PEFT, vLLM and SGLang read:
// adapter_config.json + adapter_model.safetensors with tensors named
// "base_model.model.model.layers.{i}.self_attn.q_proj.lora_A.weight" (and lora_B).
// Includes LibTorch through transformer.hpp.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/result.hpp"
#include "model/transformer.hpp"

namespace kforge::model {

/// The projections an adapter may sit on (Hugging Face module names).
const std::vector<std::string>& lora_target_names();

struct lora_options {
  /// Rank r of A and B. >= 1.
  std::int64_t rank = 16;
  /// scale = alpha / rank. > 0.
  double alpha = 32;
  /// Dropout on the adapter's input while training, in [0, 1).
  double dropout = 0;
  /// Projections of every layer that get an adapter: names from lora_target_names(), no repeats,
  /// at least one.
  std::vector<std::string> targets{"q_proj", "k_proj", "v_proj", "o_proj"};
  /// Seeds A's initialisation (its own generator: LibTorch's default one is not drawn from, so
  /// data-parallel ranks and resumed runs get the same A).
  std::uint64_t seed = 0;
};

/// Empty when valid, else what is wrong ("rank: must be >= 1").
std::string check_lora_options(const lora_options& o);

/// One adapted projection.
struct lora_adapter {
  at::Tensor A;  ///< [rank, in]
  at::Tensor B;  ///< [out, rank]
  double scale = 1;
  double dropout = 0;
  std::shared_ptr<const bool> enabled;  ///< the model's switch (lora_state::enabled)
};

/// A model's adapters (CausalLMImpl::lora).
struct lora_state {
  lora_options options;
  std::shared_ptr<bool> enabled = std::make_shared<bool>(true);
  /// PEFT module name ("base_model.model.model.layers.0.self_attn.q_proj") and adapter, in layer
  /// then target order: the order of lora_parameters().
  std::vector<std::pair<std::string, std::shared_ptr<lora_adapter>>> adapters;
};

/// `base` (the projection's output) plus the adapter's term for input `x` (only while the adapter
/// is on; dropout only while `training`).
at::Tensor apply_lora(const lora_adapter& a, const at::Tensor& base, const at::Tensor& x, bool training);

/// Adds adapters to every layer of `model` (on its device) and freezes the base parameters. An
/// error for invalid options or a model that has adapters already.
[[nodiscard]] status attach_lora(CausalLMImpl& model, const lora_options& o);

/// Draws every adapter's B from N(0, std^2), from a generator of its own seeded with `seed`. B starts
/// at zero and an adapter whose B is zero changes nothing: for adapters made up for checks and
/// benches rather than trained.
void draw_lora_b(CausalLMImpl& model, double std, std::uint64_t seed);

/// The trainable tensors: A then B of every adapter, in lora_state order. Empty without adapters.
std::vector<at::Tensor> lora_parameters(const CausalLMImpl& model);
/// The same with their PEFT tensor names ("...q_proj.lora_A.weight").
std::vector<std::pair<std::string, at::Tensor>> named_lora_parameters(const CausalLMImpl& model);

/// Switches the adapters off for its lifetime (a no-op on a model without adapters): the model
/// then computes the base model, the KL reference of LoRA training.
class lora_disabled {
 public:
  explicit lora_disabled(const CausalLMImpl& model);
  ~lora_disabled();
  lora_disabled(const lora_disabled&) = delete;
  lora_disabled& operator=(const lora_disabled&) = delete;

 private:
  std::shared_ptr<bool> enabled_;
  bool before_ = false;
};

/// The weight a projection of `layer` computes with: its base weight, plus scale * B A where it
/// has an adapter that is on (in fp32, returned in the base's dtype). `target` from
/// lora_target_names().
at::Tensor effective_weight(DecoderLayerImpl& layer, const std::string& target);

/// The parameter `name` (Hugging Face name, e.g. "model.layers.0.self_attn.q_proj.weight") as the
/// model computes with it: effective_weight() where an adapter that is on sits on it, else `param`.
at::Tensor effective_parameter(const CausalLMImpl& model, const std::string& name, const at::Tensor& param);

/// Folds every adapter into its base weight (W += scale B A) and removes the adapters: the model
/// is a plain one computing what it computed with them on. Its parameters stay frozen.
void merge_lora(CausalLMImpl& model);

inline constexpr const char* adapter_config_file = "adapter_config.json";
inline constexpr const char* adapter_weights_file = "adapter_model.safetensors";

/// Writes `dir`/adapter_config.json (peft_type LORA, r, lora_alpha, lora_dropout, target_modules,
/// base_model_name_or_path = `base_model`, bias "none", task_type CAUSAL_LM) and
/// `dir`/adapter_model.safetensors (the adapters in their own dtype, PEFT names). `dir` is
/// created if needed. An error for a model without adapters.
[[nodiscard]] status save_lora(const CausalLMImpl& model, const std::string& dir, const std::string& base_model);

/// adapter_config.json of `dir` as options (seed 0); an error for another PEFT type, bias other
/// than "none", or settings this model does not compute (rslora, DoRA, fan_in_fan_out, layer
/// subsets).
[[nodiscard]] result<lora_options> read_lora_config(const std::string& dir);

/// Loads `dir`'s adapters into `model`: attaches them as the config says when the model has none,
/// else checks the config against the model's. Every adapter tensor must be present with its
/// shape; all is checked before anything is copied.
[[nodiscard]] status load_lora(CausalLMImpl& model, const std::string& dir);

/// load_lora, where adapters of another rank, alpha or set of projections than the model's are
/// put on in place of the model's (which are dropped, not merged) rather than refused: a server
/// swapping one adapter for another. Still everything is checked before the model changes. The
/// adapters' on/off switch is a new one (on) where they were replaced, the model's own otherwise.
[[nodiscard]] status replace_lora(CausalLMImpl& model, const std::string& dir);

/// Takes the adapters off without merging them: the model is the plain base model again (its
/// parameters stay frozen). A no-op on a model without adapters.
void remove_lora(CausalLMImpl& model);

}  // namespace kforge::model

#pragma once
// Checkpoints to and from the model: safetensors entries as ATen tensors, a CausalLM's parameters
// loaded by their Hugging Face names (every parameter must be present with exactly the expected
// shape; an error names the tensor, the file and the expected shape) and saved back.
// Includes ATen through transformer.hpp.

#include <string>

#include "common/result.hpp"
#include "model/safetensors.hpp"
#include "model/transformer.hpp"

namespace kforge::model {

/// The ATen dtype of a safetensors dtype; an error for the ones ATen lacks here (U16+, F8).
[[nodiscard]] result<at::ScalarType> to_scalar_type(st_dtype t);
/// The safetensors dtype of an ATen dtype.
[[nodiscard]] result<st_dtype> to_st_dtype(at::ScalarType t);

/// A CPU tensor with the view's dtype and shape: a copy, or (copy = false, when the bytes are
/// aligned) a tensor over the mapping itself that keeps it alive. The mapping is private and
/// copy-on-write, so writing to such a tensor never changes the file.
[[nodiscard]] result<at::Tensor> to_tensor(const tensor_view& view, bool copy = true);

/// Copies every parameter of `model` from `tensors` (converting dtype). Missing tensors, wrong
/// shapes and tensors the model does not use are errors ("FILE: tensor 'NAME': ...");
/// `*.rotary_emb.inv_freq` and, with tied embeddings, `lm_head.weight` are ignored. All of it is
/// checked before anything is copied: on such an error the model keeps its weights.
[[nodiscard]] status load_weights(CausalLMImpl& model, const checkpoint_tensors& tensors);

/// Where and how a checkpoint is loaded.
struct load_options {
  /// Parameter dtype: float32 (CPU default), bfloat16 (GPU), float16.
  at::ScalarType dtype = at::kFloat;
  at::Device device = at::kCPU;
};

/// config.json + safetensors of a checkpoint directory -> a model in eval mode.
[[nodiscard]] result<CausalLM> load_causal_lm(const std::string& dir, const load_options& options = {});

/// Writes every parameter (Hugging Face names; lm_head omitted when tied, as transformers does) to
/// one safetensors file, in the parameters' dtype, with metadata {"format": "pt"}. A projection
/// with a LoRA adapter that is on is written merged (model/lora.hpp, effective_weight), so the
/// file loads as a plain model computing what this one computes.
[[nodiscard]] status save_weights(CausalLMImpl& model, const std::string& path);

/// A checkpoint directory that load_causal_lm and transformers both read: model.safetensors (as
/// save_weights) plus config.json, generation_config.json and the tokenizer files found in
/// `source_dir` (the checkpoint the model came from). `dir` is created if needed; one already
/// holding a sharded checkpoint (model.safetensors.index.json) is refused, since the index would
/// shadow the new file.
[[nodiscard]] status save_checkpoint(CausalLMImpl& model, const std::string& dir, const std::string& source_dir);

}  // namespace kforge::model

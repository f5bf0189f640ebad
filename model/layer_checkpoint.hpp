#pragma once
// Activation checkpointing of one decoder layer. LibTorch's C++ API has no torch.utils.checkpoint,
// so this is a custom autograd function: forward runs the layer without recording a graph and
// keeps only its input; backward runs the layer again with gradients on, from that input and with
// the random generator as forward found it (so dropout draws the same mask), and takes the
// gradients of the input and of the layer's trainable tensors (its parameters that require grad
// and its LoRA adapters) from that graph. The gradients are those of the plain layer: the same
// operations on the same numbers.
//
// The trainable tensors are inputs of the function, so the layer's output requires grad whenever
// one of them does, also where its input does not (the first layer of a LoRA model, whose frozen
// embeddings give an input without grad).
// Includes LibTorch through transformer.hpp.

#include <memory>
#include <vector>

#include "model/transformer.hpp"

namespace kforge::model {

/// The layer's output for `x`, its activations recomputed in backward. No KV cache.
at::Tensor checkpointed_layer(const std::shared_ptr<DecoderLayerImpl>& layer, const at::Tensor& x,
                              const rotary_tables& rope, const at::Tensor& mask);

/// What backward must reach in the layer: its parameters that require grad, then the A and B of
/// its LoRA adapters that do.
std::vector<at::Tensor> trainable_tensors(DecoderLayerImpl& layer);

}  // namespace kforge::model

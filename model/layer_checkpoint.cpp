#include "model/layer_checkpoint.hpp"

#include <mutex>

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include "model/lora.hpp"

namespace kforge::model {
namespace {

at::Tensor generator_state(const at::Device& device) {
  at::Generator gen = at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void set_generator_state(const at::Device& device, const at::Tensor& state) {
  at::Generator gen = at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

// What backward needs besides the saved input. The rotary tables and the mask carry no gradient
// (positions only), so they are kept as they are.
struct recompute_state : torch::CustomClassHolder {
  std::shared_ptr<DecoderLayerImpl> layer;
  rotary_tables rope;
  at::Tensor mask;
  at::Device device = at::kCPU;
  at::Tensor rng;  // the device's default generator before forward
};

struct checkpoint_function : torch::autograd::Function<checkpoint_function> {
  // Inputs: x, then the layer's trainable tensors, then the state (not a tensor: no gradient).
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, at::TensorList trainable,
                            c10::intrusive_ptr<recompute_state> state) {
    (void)trainable;  // reached through the layer; inputs only so that backward reaches them
    state->device = x.device();
    state->rng = generator_state(x.device());
    ctx->save_for_backward({x});
    ctx->saved_data["state"] = at::IValue::make_capsule(state);
    ctx->saved_data["trainable"] = static_cast<std::int64_t>(trainable.size());
    // Function::apply runs this with gradients off: nothing of the layer is kept.
    return state->layer->forward(x, state->rope, state->mask, nullptr, nullptr, 0);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    const auto capsule = ctx->saved_data["state"].toCapsule();
    auto state = c10::intrusive_ptr<recompute_state>::reclaim_copy(static_cast<recompute_state*>(capsule.get()));
    const auto n = static_cast<std::size_t>(ctx->saved_data["trainable"].toInt());
    const at::Tensor x_saved = ctx->get_saved_variables().front();
    const bool want_x = ctx->needs_input_grad(0);
    std::vector<at::Tensor> trainable = trainable_tensors(*state->layer);
    TORCH_CHECK(trainable.size() == n, "checkpointed layer: its trainable tensors changed between forward (", n,
                ") and backward (", trainable.size(), ")");

    // The forward again, recorded this time, with the random numbers forward drew (dropout).
    const at::Tensor now = generator_state(state->device);
    set_generator_state(state->device, state->rng);
    at::Tensor x = x_saved.detach().requires_grad_(want_x);
    at::Tensor y;
    try {
      at::AutoGradMode grad_on(true);
      y = state->layer->forward(x, state->rope, state->mask, nullptr, nullptr, 0);
    } catch (...) {
      set_generator_state(state->device, now);
      throw;
    }
    set_generator_state(state->device, now);

    std::vector<at::Tensor> wrt;
    if (want_x) wrt.push_back(x);
    for (const auto& t : trainable) wrt.push_back(t);
    torch::autograd::variable_list out;
    out.reserve(1 + n + 1);
    if (wrt.empty()) {
      out.resize(1 + n + 1);
      return out;
    }
    const auto grads = torch::autograd::grad({y}, wrt, {grad_out.front()}, /*retain_graph=*/false,
                                             /*create_graph=*/false, /*allow_unused=*/true);
    std::size_t i = 0;
    out.push_back(want_x ? grads[i++] : at::Tensor());
    for (std::size_t k = 0; k < n; ++k) out.push_back(grads[i++]);
    out.emplace_back();  // the state
    return out;
  }
};

void add_adapter(std::vector<at::Tensor>& out, const std::shared_ptr<lora_adapter>& a) {
  if (!a) return;
  if (a->A.requires_grad()) out.push_back(a->A);
  if (a->B.requires_grad()) out.push_back(a->B);
}

}  // namespace

std::vector<at::Tensor> trainable_tensors(DecoderLayerImpl& layer) {
  std::vector<at::Tensor> out;
  for (const auto& p : layer.parameters(/*recurse=*/true))
    if (p.requires_grad()) out.push_back(p);
  const auto& attn = *layer.self_attn;
  const auto& mlp = *layer.mlp;
  for (const auto* a : {&attn.q_lora, &attn.k_lora, &attn.v_lora, &attn.o_lora, &mlp.gate_lora, &mlp.up_lora,
                        &mlp.down_lora})
    add_adapter(out, *a);
  return out;
}

at::Tensor checkpointed_layer(const std::shared_ptr<DecoderLayerImpl>& layer, const at::Tensor& x,
                              const rotary_tables& rope, const at::Tensor& mask) {
  auto state = c10::make_intrusive<recompute_state>();
  state->layer = layer;
  state->rope = rope;
  state->mask = mask;
  const std::vector<at::Tensor> trainable = trainable_tensors(*layer);
  return checkpoint_function::apply(x, at::TensorList(trainable), state);
}

}  // namespace kforge::model

#include "model/transformer.hpp"

#include <cmath>
#include <limits>

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/core/grad_mode.h>
#include <torch/version.h>

#include "model/layer_checkpoint.hpp"
#include "model/lora.hpp"

// LibTorch 2.4+ has fused CUDA kernels for RMSNorm and attention. Decoding is bound by kernel
// launches on the host (about 48 per layer per token with the composite ops below), so on CUDA
// tensors these replace the composite versions; the CPU keeps the composite ops, which follow
// transformers' arithmetic step by step (the fixtures are checked against them).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define KFORGE_FUSED_CUDA_OPS 1
#endif

namespace kforge::model {

kv_cache make_kv_cache(const model_config& config, std::int64_t batch, std::int64_t capacity,
                       const at::TensorOptions& options) {
  kv_cache c;
  for (std::int64_t i = 0; i < config.num_hidden_layers; ++i) {
    c.k.push_back(at::zeros({batch, config.num_key_value_heads, capacity, config.head_dim}, options));
    c.v.push_back(at::zeros({batch, config.num_key_value_heads, capacity, config.head_dim}, options));
  }
  return c;
}

rotary_tables make_rotary(const at::Tensor& positions, std::int64_t head_dim, double theta,
                          at::ScalarType dtype) {
  // As transformers: inv_freq = 1 / theta^(arange(0, d, 2) / d) in fp32, angles = pos * inv_freq,
  // the table repeated twice along the last dimension.
  const auto f32 = at::TensorOptions().dtype(at::kFloat).device(positions.device());
  const at::Tensor exponent = at::arange(0, head_dim, 2, f32.dtype(at::kLong)).to(at::kFloat) /
                              static_cast<double>(head_dim);
  const at::Tensor inv_freq = at::reciprocal(at::pow(at::scalar_tensor(theta, f32), exponent));
  const at::Tensor angles = positions.to(at::kFloat).unsqueeze(-1) * inv_freq;  // [B, T, d/2]
  const at::Tensor emb = at::cat({angles, angles}, -1);
  return {emb.cos().to(dtype), emb.sin().to(dtype)};
}

namespace {

at::Tensor rotate_half(const at::Tensor& x) {
  const std::int64_t half = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

// x [B, H, T, D]; cos/sin [B, T, D].
at::Tensor apply_rotary(const at::Tensor& x, const rotary_tables& rope) {
  const at::Tensor cos = rope.cos.unsqueeze(1);
  const at::Tensor sin = rope.sin.unsqueeze(1);
  return x * cos + rotate_half(x) * sin;
}

torch::nn::Linear linear(std::int64_t in, std::int64_t out, bool bias) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias));
}

// transformers normalises and takes the softmax in fp32; an fp64 model (the gradient checks of the
// tests) keeps fp64 there, or its finite differences would drown in fp32 rounding.
at::ScalarType at_least_fp32(at::ScalarType t) { return t == at::kDouble ? at::kDouble : at::kFloat; }

// A projection with its LoRA adapter, if it has one.
at::Tensor project(torch::nn::Linear& proj, const std::shared_ptr<lora_adapter>& adapter, const at::Tensor& x) {
  at::Tensor y = proj(x);
  return adapter ? apply_lora(*adapter, y, x, proj->is_training()) : y;
}

}  // namespace

std::int64_t attention_bytes_per_pair(const model_config& config, at::ScalarType dtype, bool cuda) {
  const std::int64_t elem = static_cast<std::int64_t>(c10::elementSize(dtype));
  const std::int64_t masks = 1 + elem;  // allowed (bool) and the additive mask
#if defined(KFORGE_FUSED_CUDA_OPS)
  if (cuda) return masks + elem * (config.num_attention_heads / config.num_key_value_heads);
#else
  (void)cuda;
#endif
  const std::int64_t softmax = static_cast<std::int64_t>(c10::elementSize(at_least_fp32(dtype)));
  return masks + config.num_attention_heads * (3 * elem + softmax);  // scores, masked, softmax, probs
}

RMSNormImpl::RMSNormImpl(std::int64_t dim, double eps_) : eps(eps_) {
  weight = register_parameter("weight", at::ones({dim}));
}

at::Tensor RMSNormImpl::forward(const at::Tensor& x) {
#if defined(KFORGE_FUSED_CUDA_OPS)
  if (x.is_cuda()) return at::rms_norm(x, {weight.size(0)}, weight, eps);
#endif
  const at::Tensor h = x.to(at_least_fp32(x.scalar_type()));
  const at::Tensor variance = h.pow(2).mean(-1, /*keepdim=*/true);
  return weight * (h * at::rsqrt(variance + eps)).to(x.scalar_type());
}

AttentionImpl::AttentionImpl(const model_config& c)
    : heads(c.num_attention_heads), kv_heads(c.num_key_value_heads), head_dim(c.head_dim) {
  q_proj = register_module("q_proj", linear(c.hidden_size, heads * head_dim, c.qkv_bias));
  k_proj = register_module("k_proj", linear(c.hidden_size, kv_heads * head_dim, c.qkv_bias));
  v_proj = register_module("v_proj", linear(c.hidden_size, kv_heads * head_dim, c.qkv_bias));
  o_proj = register_module("o_proj", linear(heads * head_dim, c.hidden_size, c.o_bias));
}

at::Tensor AttentionImpl::forward(const at::Tensor& x, const rotary_tables& rope, const at::Tensor& mask,
                                  at::Tensor* k_cache, at::Tensor* v_cache, std::int64_t past) {
  const std::int64_t B = x.size(0), T = x.size(1);
  at::Tensor q = project(q_proj, q_lora, x).view({B, T, heads, head_dim}).transpose(1, 2);
  at::Tensor k = project(k_proj, k_lora, x).view({B, T, kv_heads, head_dim}).transpose(1, 2);
  at::Tensor v = project(v_proj, v_lora, x).view({B, T, kv_heads, head_dim}).transpose(1, 2);
  q = apply_rotary(q, rope);
  k = apply_rotary(k, rope);
  if (k_cache != nullptr) {
    k_cache->narrow(2, past, T).copy_(k);
    v_cache->narrow(2, past, T).copy_(v);
    k = k_cache->narrow(2, 0, past + T);
    v = v_cache->narrow(2, 0, past + T);
  }
  const std::int64_t S = k.size(2);
  const std::int64_t rep = heads / kv_heads;
  // Query heads [g*rep, (g+1)*rep) share key/value head g (transformers' repeat_kv). The group's
  // queries are folded into the query dimension ([B, kv_heads, rep * T, D]) so that each key/value
  // head is one matmul against the cache as it lies: broadcasting K and V over a group dimension
  // instead would make matmul materialise rep copies of them (the whole cache, every layer, every
  // decoding step).
  const at::Tensor qg = q.reshape({B, kv_heads, rep * T, head_dim});
#if defined(KFORGE_FUSED_CUDA_OPS)
  if (q.is_cuda()) {
    // Not cuDNN's backend: it builds an execution plan for every new key length, and a decoding
    // step's key length is new every step (measured on the H200, LibTorch 2.11: 9.1 ms of host time
    // per attention call, 55 ms per step of a 6-layer model, the GPU 2-3 % busy). The
    // memory-efficient kernel that SDPA picks instead takes the same mask and needs no plan.
    static const bool no_cudnn_sdp = [] {
      at::globalContext().setSDPUseCuDNN(false);
      return true;
    }();
    (void)no_cudnn_sdp;
    // One fused kernel over the folded layout: the mask's T rows repeat for each of the rep query
    // heads folded into a key/value head. Default scale 1/sqrt(D), as below.
    const at::Tensor folded_mask = mask.unsqueeze(2)
                                       .expand({mask.size(0), 1, rep, T, S})
                                       .reshape({mask.size(0), 1, rep * T, S});
    const at::Tensor out = at::scaled_dot_product_attention(qg, k, v, folded_mask);
    return project(o_proj, o_lora, out.reshape({B, heads, T, head_dim}).transpose(1, 2).reshape({B, T, heads * head_dim}));
  }
#endif
  at::Tensor scores = at::matmul(qg, k.transpose(-1, -2)) / std::sqrt(static_cast<double>(head_dim));
  scores = scores.reshape({B, kv_heads, rep, T, S}) + mask.unsqueeze(1);
  const at::Tensor probs = at::softmax(scores, -1, at_least_fp32(scores.scalar_type())).to(q.scalar_type());
  const at::Tensor out = at::matmul(probs.reshape({B, kv_heads, rep * T, S}), v);  // [B, kv, rep*T, D]
  return project(o_proj, o_lora, out.reshape({B, heads, T, head_dim}).transpose(1, 2).reshape({B, T, heads * head_dim}));
}

MLPImpl::MLPImpl(const model_config& c) {
  gate_proj = register_module("gate_proj", linear(c.hidden_size, c.intermediate_size, false));
  up_proj = register_module("up_proj", linear(c.hidden_size, c.intermediate_size, false));
  down_proj = register_module("down_proj", linear(c.intermediate_size, c.hidden_size, false));
}

at::Tensor MLPImpl::forward(const at::Tensor& x) {
  return project(down_proj, down_lora, at::silu(project(gate_proj, gate_lora, x)) * project(up_proj, up_lora, x));
}

DecoderLayerImpl::DecoderLayerImpl(const model_config& c) {
  self_attn = register_module("self_attn", Attention(c));
  mlp = register_module("mlp", MLP(c));
  input_layernorm = register_module("input_layernorm", RMSNorm(c.hidden_size, c.rms_norm_eps));
  post_attention_layernorm = register_module("post_attention_layernorm", RMSNorm(c.hidden_size, c.rms_norm_eps));
}

at::Tensor DecoderLayerImpl::forward(const at::Tensor& x, const rotary_tables& rope, const at::Tensor& mask,
                                     at::Tensor* k_cache, at::Tensor* v_cache, std::int64_t past) {
  const at::Tensor h = x + self_attn->forward(input_layernorm(x), rope, mask, k_cache, v_cache, past);
  return h + mlp(post_attention_layernorm(h));
}

TransformerImpl::TransformerImpl(const model_config& c) : config(c) {
  embed_tokens = register_module("embed_tokens", torch::nn::Embedding(c.vocab_size, c.hidden_size));
  layers = register_module("layers", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) layers->push_back(DecoderLayer(c));
  norm = register_module("norm", RMSNorm(c.hidden_size, c.rms_norm_eps));
}

at::Tensor TransformerImpl::forward(const at::Tensor& ids, const forward_args& args) {
  TORCH_CHECK(ids.dim() == 2, "forward: ids must be [batch, tokens], got ", ids.sizes());
  const std::int64_t B = ids.size(0), T = ids.size(1);
  kv_cache* cache = args.cache;
  const std::int64_t past = cache != nullptr ? cache->length : 0;
  const std::int64_t S = past + T;
  if (cache != nullptr) {
    TORCH_CHECK(static_cast<std::int64_t>(cache->k.size()) == config.num_hidden_layers,
                "forward: the cache has ", cache->k.size(), " layers, the model ", config.num_hidden_layers);
    TORCH_CHECK(cache->batch() == B, "forward: the cache holds ", cache->batch(), " rows, ids ", B);
    TORCH_CHECK(S <= cache->capacity(), "forward: ", S, " positions exceed the cache's capacity ",
                cache->capacity());
  }
  const auto dev = ids.device();
  at::Tensor h = embed_tokens(ids);
  const auto dtype = h.scalar_type();

  at::Tensor key_ok;  // [B, S] bool, undefined = all keys are tokens
  if (args.attention_mask.defined()) {
    TORCH_CHECK(args.attention_mask.dim() == 2 && args.attention_mask.size(0) == B && args.attention_mask.size(1) == S,
                "forward: attention_mask must be [", B, ", ", S, "], got ", args.attention_mask.sizes());
    key_ok = args.attention_mask.to(dev).to(at::kBool);
  }
  at::Tensor positions = args.positions;
  if (!positions.defined()) {
    if (key_ok.defined()) {
      positions = (key_ok.to(at::kLong).cumsum(1) - 1).clamp_min(0).narrow(1, past, T);
    } else {
      positions = at::arange(past, S, ids.options().dtype(at::kLong)).unsqueeze(0).expand({B, T});
    }
  }
  positions = positions.to(dev);

  // Additive mask [B, 1, T, S]: causal, and padding keys masked. The lowest finite value rather
  // than -inf keeps fully masked rows (queries at padding) finite, as transformers does.
  const auto opts = at::TensorOptions().device(dev);
  const at::Tensor qpos = at::arange(past, S, opts.dtype(at::kLong)).unsqueeze(1);  // [T, 1]
  const at::Tensor kpos = at::arange(0, S, opts.dtype(at::kLong)).unsqueeze(0);     // [1, S]
  at::Tensor allowed = (kpos <= qpos).unsqueeze(0);                                 // [1, T, S]
  if (key_ok.defined()) allowed = allowed & key_ok.unsqueeze(1);                    // [B, T, S]
  const double lowest = dtype == at::kFloat    ? std::numeric_limits<float>::lowest()
                        : dtype == at::kDouble ? std::numeric_limits<double>::lowest()
                        : dtype == at::kHalf   ? -65504.0
                                               : -3.3895313892515355e38;  // bf16 lowest
  const at::Tensor mask =
      at::where(allowed, at::zeros({}, opts.dtype(dtype)), at::full({}, lowest, opts.dtype(dtype))).unsqueeze(1);

  const rotary_tables rope = make_rotary(positions, config.head_dim, config.rope_theta, dtype);
  // Recomputing a layer needs its inputs only; with a cache (generation) nothing is recorded.
  const bool recompute = checkpoint_layers && cache == nullptr && at::GradMode::is_enabled();
  for (std::int64_t i = 0; i < config.num_hidden_layers; ++i) {
    auto layer = layers->ptr<DecoderLayerImpl>(static_cast<std::size_t>(i));
    if (recompute) {
      h = checkpointed_layer(layer, h, rope, mask);
      continue;
    }
    at::Tensor* kc = cache != nullptr ? &cache->k[static_cast<std::size_t>(i)] : nullptr;
    at::Tensor* vc = cache != nullptr ? &cache->v[static_cast<std::size_t>(i)] : nullptr;
    h = layer->forward(h, rope, mask, kc, vc, past);
  }
  if (cache != nullptr) cache->length = S;
  return norm(h);
}

CausalLMImpl::CausalLMImpl(const model_config& c) : config(c) {
  model = register_module("model", Transformer(c));
  if (!c.tie_word_embeddings) lm_head = register_module("lm_head", linear(c.hidden_size, c.vocab_size, false));
}

at::Tensor CausalLMImpl::output_weight() const {
  return lm_head ? lm_head->weight : model->embed_tokens->weight;
}

at::Tensor CausalLMImpl::forward(const at::Tensor& ids, const forward_args& args) {
  at::Tensor h = model->forward(ids, args);
  if (args.last_only) h = h.narrow(1, h.size(1) - 1, 1);
  return at::matmul(h, output_weight().t());
}

}  // namespace kforge::model

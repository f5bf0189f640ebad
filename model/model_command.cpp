#include "model/model_command.hpp"

#include <ATen/ATen.h>

#include "model/dtype_names.hpp"
#include "model/lora.hpp"
#include "model/weights.hpp"

namespace kforge::model {
namespace {

result<at::ScalarType> dtype_flag(const std::string& name) {
  if (auto t = dtype_named(name)) return *t;
  return error{"--dtype: \"" + name + "\" is none of float32, bfloat16, float16"};
}

result<at::Device> device_named(const std::string& name) {
  try {
    return at::Device(name);
  } catch (const c10::Error&) {
    return error{"--device: \"" + name + "\" is not a device (cpu, cuda, cuda:N)"};
  }
}

// The model the logits come from: the checkpoint, with the adapter's weights on where one is named.
result<CausalLM> load_for_logits(const logits_options& opt) {
  auto dtype = dtype_flag(opt.dtype);
  if (!dtype) return dtype.err();
  auto device = device_named(opt.device);
  if (!device) return device.err();
  load_options lo;
  lo.dtype = *dtype;
  lo.device = *device;
  auto m = load_causal_lm(opt.model, lo);
  if (!m) return m.err();
  if (!opt.adapter.empty())
    if (auto s = load_lora(**m, opt.adapter); !s) return s.err();
  return m;
}

// Logits [T, V] in fp32 on the CPU for one sequence of `tokens`.
at::Tensor logits_of(CausalLMImpl& model, const std::vector<std::int64_t>& tokens) {
  at::NoGradGuard no_grad;
  const at::Tensor ids = at::tensor(tokens, at::kLong).view({1, -1}).to(model.output_weight().device());
  return model.forward(ids).squeeze(0).to(at::kCPU, at::kFloat).contiguous();
}

status write_logits(const std::string& path, const at::Tensor& logits, const std::vector<std::int64_t>& tokens) {
  const auto n = static_cast<std::int64_t>(tokens.size());
  return write_safetensors(path,
                           {{"logits", st_dtype::f32, logits.sizes().vec(), logits.data_ptr(),
                             static_cast<std::size_t>(logits.numel()) * sizeof(float)},
                            {"tokens", st_dtype::i64, {n}, tokens.data(), tokens.size() * sizeof(std::int64_t)}},
                           {{"format", "pt"}});
}

lora_options adapter_options(const random_adapter_options& opt) {
  lora_options o;
  o.rank = opt.rank;
  o.alpha = opt.alpha;
  o.targets = opt.targets.empty() ? lora_target_names() : opt.targets;
  o.seed = opt.seed;
  return o;
}

}  // namespace

int logits_command(const logits_options& opt, std::ostream& out, std::ostream& err) {
  if (opt.tokens.empty()) {
    err << "kforge model logits: --tokens: at least one token id\n";
    return 2;
  }
  auto m = load_for_logits(opt);
  if (!m) {
    err << "kforge model logits: " << m.message() << "\n";
    return 2;
  }
  at::Tensor logits;
  try {
    logits = logits_of(**m, opt.tokens);
  } catch (const c10::Error& e) {  // a token id outside the vocabulary
    err << "kforge model logits: " << e.what_without_backtrace() << "\n";
    return 2;
  }
  if (auto s = write_logits(opt.out, logits, opt.tokens); !s) {
    err << "kforge model logits: " << s.message() << "\n";
    return 1;
  }
  out << "logits [" << logits.size(0) << ", " << logits.size(1) << "] of " << opt.model
      << (opt.adapter.empty() ? "" : " with adapter " + opt.adapter) << " (" << opt.dtype << " on " << opt.device
      << ", max |logit| " << logits.abs().max().item<double>() << ") written to " << opt.out << "\n";
  return 0;
}

int random_adapter_command(const random_adapter_options& opt, std::ostream& out, std::ostream& err) {
  auto config = load_model_config(opt.model);
  if (!config) {
    err << "kforge model random-adapter: " << config.message() << "\n";
    return 2;
  }
  if (!(opt.b_std > 0)) {
    err << "kforge model random-adapter: --b-std: must be > 0 (B = 0 would change nothing)\n";
    return 2;
  }
  // Only the shapes matter: the adapters sit on a model built from config.json, not loaded.
  CausalLM model(*config);
  if (auto s = attach_lora(*model, adapter_options(opt)); !s) {
    err << "kforge model random-adapter: " << s.message() << "\n";
    return 2;
  }
  draw_lora_b(*model, opt.b_std, opt.seed + 1);  // one past A's seed: B is not A's stream
  if (auto s = save_lora(*model, opt.out, opt.model); !s) {
    err << "kforge model random-adapter: " << s.message() << "\n";
    return 1;
  }
  out << "LoRA adapter (r " << opt.rank << ", alpha " << opt.alpha << ", " << model->lora->adapters.size()
      << " projections, B ~ N(0, " << opt.b_std << "^2)) for " << opt.model << " written to " << opt.out << "\n";
  return 0;
}

}  // namespace kforge::model

#include "model/weights.hpp"

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <set>
#include <sstream>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include "model/lora.hpp"

namespace kforge::model {
namespace {

std::string shape_str(at::IntArrayRef s) {
  std::ostringstream os;
  os << '[';
  for (std::size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << ']';
  return os.str();
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

result<at::ScalarType> to_scalar_type(st_dtype t) {
  switch (t) {
    case st_dtype::f64: return at::kDouble;
    case st_dtype::f32: return at::kFloat;
    case st_dtype::f16: return at::kHalf;
    case st_dtype::bf16: return at::kBFloat16;
    case st_dtype::i64: return at::kLong;
    case st_dtype::i32: return at::kInt;
    case st_dtype::i16: return at::kShort;
    case st_dtype::i8: return at::kChar;
    case st_dtype::u8: return at::kByte;
    case st_dtype::boolean: return at::kBool;
    default: break;
  }
  return error{"dtype " + std::string(st_dtype_name(t)) + " has no ATen equivalent here"};
}

result<st_dtype> to_st_dtype(at::ScalarType t) {
  switch (t) {
    case at::kDouble: return st_dtype::f64;
    case at::kFloat: return st_dtype::f32;
    case at::kHalf: return st_dtype::f16;
    case at::kBFloat16: return st_dtype::bf16;
    case at::kLong: return st_dtype::i64;
    case at::kInt: return st_dtype::i32;
    case at::kShort: return st_dtype::i16;
    case at::kChar: return st_dtype::i8;
    case at::kByte: return st_dtype::u8;
    case at::kBool: return st_dtype::boolean;
    default: break;
  }
  return error{std::string("dtype ") + c10::toString(t) + " cannot be written to safetensors"};
}

result<at::Tensor> to_tensor(const tensor_view& view, bool copy) {
  auto st = to_scalar_type(view.dtype);
  if (!st) return error{view.file + ": tensor '" + view.name + "': " + st.message()};
  const auto options = at::TensorOptions().dtype(st.value());
  if (view.numel() == 0) return at::empty(view.shape, options);
  void* data = const_cast<std::byte*>(view.data);  // the mapping is private: writes stay in memory
  const bool aligned = reinterpret_cast<std::uintptr_t>(data) % st_dtype_size(view.dtype) == 0;
  if (!copy && aligned) {
    auto owner = view.owner;
    return at::from_blob(data, view.shape, [owner](void*) mutable { owner.reset(); }, options);
  }
  at::Tensor out = at::empty(view.shape, options);
  std::memcpy(out.data_ptr(), view.data, view.nbytes);
  return out;
}

status load_weights(CausalLMImpl& model, const checkpoint_tensors& tensors) {
  at::NoGradGuard no_grad;
  // Everything is checked before the first parameter is written, so a bad file (a missing tensor,
  // a wrong shape, an extra tensor) leaves the model as it was: the sampler keeps serving the old
  // weights when a new version fails to load.
  std::set<std::string> used;
  std::vector<std::pair<at::Tensor, const tensor_view*>> todo;
  for (auto& item : model.named_parameters(/*recurse=*/true)) {
    const std::string& name = item.key();
    const at::Tensor& param = item.value();
    const tensor_view* v = tensors.find(name);
    if (v == nullptr)
      return error{tensors.path() + ": missing tensor '" + name + "' (expected shape " +
                   shape_str(param.sizes()) + ")"};
    if (at::IntArrayRef(v->shape) != param.sizes())
      return error{v->file + ": tensor '" + name + "' has shape " + shape_str(v->shape) + ", expected " +
                   shape_str(param.sizes())};
    if (v->dtype != st_dtype::f32 && v->dtype != st_dtype::bf16 && v->dtype != st_dtype::f16 &&
        v->dtype != st_dtype::f64)
      return error{v->file + ": tensor '" + name + "' has dtype " + std::string(st_dtype_name(v->dtype)) +
                   ", expected a floating-point type"};
    todo.emplace_back(param, v);
    used.insert(name);
  }
  std::vector<std::string> unused;
  for (const auto& n : tensors.names()) {
    if (used.count(n) || ends_with(n, ".rotary_emb.inv_freq")) continue;
    if (n == "lm_head.weight" && model.config.tie_word_embeddings) continue;
    unused.push_back(n);
  }
  if (!unused.empty()) {
    std::string list;
    for (std::size_t i = 0; i < unused.size() && i < 5; ++i) list += (i ? ", '" : "'") + unused[i] + "'";
    if (unused.size() > 5) list += ", ... (" + std::to_string(unused.size()) + " in all)";
    return error{tensors.path() + ": tensors the " + model.config.architecture_name +
                 " model does not have: " + list};
  }
  for (auto& [param, v] : todo) {
    auto t = to_tensor(*v, /*copy=*/false);
    if (!t) return t.err();  // not reached: the dtype was checked above
    param.copy_(t.value());
  }
  return status::success();
}

result<CausalLM> load_causal_lm(const std::string& dir, const load_options& options) {
  auto config = load_model_config(dir);
  if (!config) return config.err();
  auto tensors = checkpoint_tensors::open(dir);
  if (!tensors) return tensors.err();
  try {
    CausalLM model(config.value());
    // Moved first, so that each tensor is copied (and converted) once, from the mapping straight
    // into its place on the device.
    model->to(options.device, options.dtype);
    auto s = load_weights(*model, tensors.value());
    if (!s) return s.err();
    model->eval();
    return model;
  } catch (const c10::Error& e) {
    return error{dir + ": " + e.what_without_backtrace()};
  }
}

status save_weights(CausalLMImpl& model, const std::string& path) {
  std::vector<at::Tensor> keep;  // contiguous CPU copies, alive until written
  std::vector<tensor_bytes> entries;
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    // With LoRA adapters on, the merged weight: the file is the model as it computes.
    const at::Tensor t = effective_parameter(model, item.key(), item.value()).detach().to(at::kCPU).contiguous();
    auto dt = to_st_dtype(t.scalar_type());
    if (!dt) return error{path + ": tensor '" + item.key() + "': " + dt.message()};
    keep.push_back(t);
    entries.push_back({item.key(), dt.value(), t.sizes().vec(), t.data_ptr(),
                       static_cast<std::size_t>(t.numel()) * t.element_size()});
  }
  return write_safetensors(path, entries, {{"format", "pt"}});
}

status save_checkpoint(CausalLMImpl& model, const std::string& dir, const std::string& source_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return error{dir + ": cannot create: " + ec.message()};
  if (fs::exists(fs::path(dir) / "model.safetensors.index.json", ec))
    return error{dir + ": holds a sharded checkpoint (model.safetensors.index.json): save into a fresh directory"};
  if (!fs::exists(fs::path(source_dir) / "config.json", ec))
    return error{source_dir + ": no config.json to copy"};
  for (const char* name : {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                           "special_tokens_map.json", "vocab.json", "merges.txt"}) {
    const fs::path from = fs::path(source_dir) / name;
    const fs::path to = fs::path(dir) / name;
    if (!fs::exists(from, ec) || (fs::exists(to, ec) && fs::equivalent(from, to, ec))) continue;
    fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec);
    if (ec) return error{to.string() + ": cannot copy from " + from.string() + ": " + ec.message()};
  }
  return save_weights(model, (fs::path(dir) / "model.safetensors").string());
}

}  // namespace kforge::model

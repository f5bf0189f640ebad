#include "model/lora.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <nlohmann/json.hpp>

#include "common/text_file.hpp"
#include "model/json_object.hpp"
#include "model/weights.hpp"

namespace kforge::model {
namespace {

namespace fs = std::filesystem;

// One projection of a layer: its module and its adapter slot.
struct projection {
  torch::nn::Linear* linear = nullptr;
  std::shared_ptr<lora_adapter>* adapter = nullptr;
  const char* block = "";  // "self_attn" or "mlp", as in the Hugging Face name
};

projection find_projection(DecoderLayerImpl& layer, const std::string& target) {
  auto& a = *layer.self_attn;
  auto& m = *layer.mlp;
  if (target == "q_proj") return {&a.q_proj, &a.q_lora, "self_attn"};
  if (target == "k_proj") return {&a.k_proj, &a.k_lora, "self_attn"};
  if (target == "v_proj") return {&a.v_proj, &a.v_lora, "self_attn"};
  if (target == "o_proj") return {&a.o_proj, &a.o_lora, "self_attn"};
  if (target == "gate_proj") return {&m.gate_proj, &m.gate_lora, "mlp"};
  if (target == "up_proj") return {&m.up_proj, &m.up_lora, "mlp"};
  if (target == "down_proj") return {&m.down_proj, &m.down_lora, "mlp"};
  return {};
}

DecoderLayerImpl& layer_of(const CausalLMImpl& model, std::size_t i) {
  return *model.model->layers->ptr<DecoderLayerImpl>(i);
}

// An adapter the options ask for: where it goes, its PEFT module name and its shapes.
struct planned_adapter {
  std::size_t layer = 0;
  std::string target;
  std::string name;
  std::int64_t in = 0, out = 0;
};

// In layer order, then lora_target_names() order: the same for any order of options.targets.
std::vector<planned_adapter> plan(const CausalLMImpl& model, const lora_options& o) {
  std::vector<planned_adapter> out;
  const auto layers = static_cast<std::size_t>(model.config.num_hidden_layers);
  for (std::size_t i = 0; i < layers; ++i)
    for (const auto& t : lora_target_names()) {
      if (std::find(o.targets.begin(), o.targets.end(), t) == o.targets.end()) continue;
      const projection p = find_projection(layer_of(model, i), t);
      const at::Tensor& w = (*p.linear)->weight;
      out.push_back({i, t, "base_model.model.model.layers." + std::to_string(i) + "." + p.block + "." + t,
                     w.size(1), w.size(0)});
    }
  return out;
}

// Adapters train in fp32 (fp64 on an fp64 model, for exact tests), whatever the base is in.
at::ScalarType adapter_dtype(const CausalLMImpl& model) {
  return model.output_weight().scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

at::Tensor cast(const at::Tensor& t, at::ScalarType dt) { return t.scalar_type() == dt ? t : t.to(dt); }

}  // namespace

const std::vector<std::string>& lora_target_names() {
  static const std::vector<std::string> names{"q_proj", "k_proj", "v_proj", "o_proj",
                                              "gate_proj", "up_proj", "down_proj"};
  return names;
}

std::string check_lora_options(const lora_options& o) {
  if (o.rank < 1) return "rank: must be >= 1";
  if (!(o.alpha > 0) || !std::isfinite(o.alpha)) return "alpha: must be > 0";
  if (!(o.dropout >= 0 && o.dropout < 1)) return "dropout: must be in [0, 1)";
  if (o.targets.empty()) return "targets: must name at least one projection";
  std::set<std::string> seen;
  for (const auto& t : o.targets) {
    const auto& known = lora_target_names();
    if (std::find(known.begin(), known.end(), t) == known.end()) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      return "targets: unknown projection \"" + t + "\" (known: " + list + ")";
    }
    if (!seen.insert(t).second) return "targets: \"" + t + "\" named twice";
  }
  return {};
}

at::Tensor apply_lora(const lora_adapter& a, const at::Tensor& base, const at::Tensor& x, bool training) {
  if (a.enabled && !*a.enabled) return base;
  const at::Tensor in = a.dropout > 0 ? at::dropout(x, a.dropout, training) : x;
  // On a bf16 base the product runs in bf16 on casts of the fp32 adapters; the casts are recorded,
  // so the gradients reach A and B in fp32.
  const auto dt = x.scalar_type();
  return base + at::matmul(at::matmul(in, cast(a.A, dt).t()), cast(a.B, dt).t()) * a.scale;
}

status attach_lora(CausalLMImpl& model, const lora_options& o) {
  if (auto why = check_lora_options(o); !why.empty()) return error{"lora: " + why};
  if (model.lora) return error{"lora: the model has adapters already"};
  auto state = std::make_shared<lora_state>();
  state->options = o;
  const auto dtype = adapter_dtype(model);
  const auto device = model.output_weight().device();
  // Its own generator, drawn on the CPU: the same A on every device and every rank.
  at::Generator gen = at::detail::createCPUGenerator(o.seed);
  for (const auto& p : plan(model, o)) {
    auto a = std::make_shared<lora_adapter>();
    // nn.Linear's (and PEFT's) default init of A, kaiming_uniform(a = sqrt(5)): U(±1/sqrt(in)).
    const double bound = 1.0 / std::sqrt(static_cast<double>(p.in));
    a->A = at::empty({o.rank, p.in}, at::kDouble).uniform_(-bound, bound, gen).to(device, dtype);
    a->B = at::zeros({p.out, o.rank}, at::TensorOptions().dtype(dtype).device(device));
    a->A.set_requires_grad(true);
    a->B.set_requires_grad(true);
    a->scale = o.alpha / static_cast<double>(o.rank);
    a->dropout = o.dropout;
    a->enabled = state->enabled;
    *find_projection(layer_of(model, p.layer), p.target).adapter = a;
    state->adapters.emplace_back(p.name, std::move(a));
  }
  for (auto& param : model.parameters(/*recurse=*/true)) param.set_requires_grad(false);
  model.lora = std::move(state);
  return {};
}

std::vector<at::Tensor> lora_parameters(const CausalLMImpl& model) {
  std::vector<at::Tensor> out;
  for (auto& [name, t] : named_lora_parameters(model)) out.push_back(t);
  return out;
}

void draw_lora_b(CausalLMImpl& model, double std, std::uint64_t seed) {
  if (!model.lora) return;
  at::NoGradGuard no_grad;
  at::Generator gen = at::detail::createCPUGenerator(seed);
  for (const auto& [name, a] : model.lora->adapters)
    a->B.copy_(at::empty(a->B.sizes(), at::kDouble).normal_(0, std, gen));
}

std::vector<std::pair<std::string, at::Tensor>> named_lora_parameters(const CausalLMImpl& model) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  if (!model.lora) return out;
  for (const auto& [name, a] : model.lora->adapters) {
    out.emplace_back(name + ".lora_A.weight", a->A);
    out.emplace_back(name + ".lora_B.weight", a->B);
  }
  return out;
}

lora_disabled::lora_disabled(const CausalLMImpl& model) {
  if (!model.lora) return;
  enabled_ = model.lora->enabled;
  before_ = *enabled_;
  *enabled_ = false;
}

lora_disabled::~lora_disabled() {
  if (enabled_) *enabled_ = before_;
}

at::Tensor effective_weight(DecoderLayerImpl& layer, const std::string& target) {
  const projection p = find_projection(layer, target);
  if (p.linear == nullptr) throw std::invalid_argument("effective_weight: unknown projection " + target);
  const at::Tensor& w = (*p.linear)->weight;
  const auto& a = *p.adapter;
  if (!a || (a->enabled && !*a->enabled)) return w.detach();
  at::NoGradGuard no_grad;
  const auto dt = w.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  return (cast(w, dt) + at::matmul(cast(a->B, dt), cast(a->A, dt)) * a->scale).to(w.scalar_type());
}

at::Tensor effective_parameter(const CausalLMImpl& model, const std::string& name, const at::Tensor& param) {
  if (!model.lora || !*model.lora->enabled) return param;
  // "model.layers.<i>.<block>.<target>.weight"
  static const std::string prefix = "model.layers.", suffix = ".weight";
  if (name.compare(0, prefix.size(), prefix) != 0 || name.size() <= prefix.size() + suffix.size() ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return param;
  const std::size_t dot = name.find('.', prefix.size());
  const std::size_t last = name.rfind('.', name.size() - suffix.size() - 1);
  if (dot == std::string::npos || last == std::string::npos || last < dot) return param;
  const std::string target = name.substr(last + 1, name.size() - suffix.size() - last - 1);
  std::size_t layer = 0;
  try {
    layer = static_cast<std::size_t>(std::stoull(name.substr(prefix.size(), dot - prefix.size())));
  } catch (const std::exception&) {
    return param;
  }
  if (layer >= static_cast<std::size_t>(model.config.num_hidden_layers)) return param;
  const projection p = find_projection(layer_of(model, layer), target);
  if (p.linear == nullptr || !*p.adapter || !(*p.linear)->weight.is_same(param)) return param;
  return effective_weight(layer_of(model, layer), target);
}

void merge_lora(CausalLMImpl& model) {
  if (!model.lora) return;
  at::NoGradGuard no_grad;
  const bool on = *model.lora->enabled;
  for (std::size_t i = 0; i < static_cast<std::size_t>(model.config.num_hidden_layers); ++i)
    for (const auto& t : lora_target_names()) {
      const projection p = find_projection(layer_of(model, i), t);
      if (!*p.adapter) continue;
      if (on) (*p.linear)->weight.copy_(effective_weight(layer_of(model, i), t));
      p.adapter->reset();
    }
  model.lora.reset();
}

status save_lora(const CausalLMImpl& model, const std::string& dir, const std::string& base_model) {
  if (!model.lora) return error{dir + ": the model has no LoRA adapters to save"};
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return error{dir + ": cannot create: " + ec.message()};
  const lora_options& o = model.lora->options;
  std::vector<std::string> targets;
  for (const auto& t : lora_target_names())
    if (std::find(o.targets.begin(), o.targets.end(), t) != o.targets.end()) targets.push_back(t);
  nlohmann::json j;
  j["peft_type"] = "LORA";
  j["task_type"] = "CAUSAL_LM";
  j["r"] = o.rank;
  if (o.alpha == std::floor(o.alpha) && std::abs(o.alpha) < 1e15) j["lora_alpha"] = static_cast<std::int64_t>(o.alpha);
  else j["lora_alpha"] = o.alpha;
  j["lora_dropout"] = o.dropout;
  j["target_modules"] = targets;
  j["base_model_name_or_path"] = base_model;
  j["bias"] = "none";
  // What this model computes, said explicitly so that PEFT's defaults cannot differ.
  j["fan_in_fan_out"] = false;
  j["use_rslora"] = false;
  j["use_dora"] = false;
  j["inference_mode"] = true;
  j["modules_to_save"] = nullptr;
  j["layers_to_transform"] = nullptr;
  if (auto s = write_text_file_atomically((fs::path(dir) / adapter_config_file).string(), j.dump(2) + "\n"); !s)
    return s;

  std::vector<at::Tensor> keep;
  std::vector<tensor_bytes> entries;
  const std::string path = (fs::path(dir) / adapter_weights_file).string();
  for (const auto& [name, t0] : named_lora_parameters(model)) {
    const at::Tensor t = t0.detach().to(at::kCPU).contiguous();
    auto dt = to_st_dtype(t.scalar_type());
    if (!dt) return error{path + ": tensor '" + name + "': " + dt.message()};
    keep.push_back(t);
    entries.push_back({name, dt.value(), t.sizes().vec(), t.data_ptr(),
                       static_cast<std::size_t>(t.numel()) * t.element_size()});
  }
  return write_safetensors(path, entries, {{"format", "pt"}});
}

result<lora_options> read_lora_config(const std::string& dir) {
  const std::string path = (fs::path(dir) / adapter_config_file).string();
  auto text = read_text_file(path);
  if (!text) return text.err();
  auto parsed = parse_json_object(*text, path);
  if (!parsed) return parsed.err();
  const nlohmann::json& j = *parsed;
  const auto bad = [&](const std::string& key, const std::string& why) { return error{path + ": " + key + ": " + why}; };
  if (!j.contains("peft_type") || j["peft_type"] != "LORA") return bad("peft_type", "must be \"LORA\"");
  lora_options o;
  if (!j.contains("r") || !j["r"].is_number_integer()) return bad("r", "missing or not an integer");
  o.rank = j["r"].get<std::int64_t>();
  if (!j.contains("lora_alpha") || !j["lora_alpha"].is_number()) return bad("lora_alpha", "missing or not a number");
  o.alpha = j["lora_alpha"].get<double>();
  if (j.contains("lora_dropout")) {
    if (!j["lora_dropout"].is_number()) return bad("lora_dropout", "not a number");
    o.dropout = j["lora_dropout"].get<double>();
  }
  if (!j.contains("target_modules") || !j["target_modules"].is_array())
    return bad("target_modules", "missing or not a list of module names (a regular expression is not read here)");
  o.targets.clear();
  for (const auto& t : j["target_modules"]) {
    if (!t.is_string()) return bad("target_modules", "holds a non-string");
    o.targets.push_back(t.get<std::string>());
  }
  // Settings that would make PEFT compute something else than apply_lora does.
  const auto must_be = [&](const char* key, const nlohmann::json& ok) -> status {
    if (j.contains(key) && !j[key].is_null() && j[key] != ok)
      return bad(key, "must be " + ok.dump() + " (others are not supported here), got " + j[key].dump());
    return {};
  };
  for (auto [key, ok] : std::initializer_list<std::pair<const char*, nlohmann::json>>{
           {"bias", "none"}, {"use_rslora", false}, {"use_dora", false}, {"fan_in_fan_out", false}})
    if (auto s = must_be(key, ok); !s) return s.err();
  for (const char* key : {"layers_to_transform", "modules_to_save"})
    if (j.contains(key) && !j[key].is_null() && !(j[key].is_array() && j[key].empty()))
      return bad(key, "must be null (others are not supported here)");
  for (const char* key : {"rank_pattern", "alpha_pattern"})
    if (j.contains(key) && !j[key].is_null() && !(j[key].is_object() && j[key].empty()))
      return bad(key, "must be empty (others are not supported here)");
  if (auto why = check_lora_options(o); !why.empty()) return error{path + ": " + why};
  return o;
}

void remove_lora(CausalLMImpl& model) {
  if (!model.lora) return;
  for (std::size_t i = 0; i < static_cast<std::size_t>(model.config.num_hidden_layers); ++i)
    for (const auto& t : lora_target_names()) find_projection(layer_of(model, i), t).adapter->reset();
  model.lora.reset();
}

namespace {

// load_lora and replace_lora: `replace` takes off adapters of another shape instead of refusing them.
status load_lora_from(CausalLMImpl& model, const std::string& dir, bool replace) {
  auto o = read_lora_config(dir);
  if (!o) return o.err();
  bool reattach = false;
  if (model.lora) {
    const lora_options& have = model.lora->options;
    std::set<std::string> a(have.targets.begin(), have.targets.end()), b(o->targets.begin(), o->targets.end());
    if (have.rank != o->rank || have.alpha != o->alpha || a != b) {
      if (!replace)
        return error{dir + ": its adapters (r " + std::to_string(o->rank) + ", alpha " + std::to_string(o->alpha) +
                     ") differ from the model's (r " + std::to_string(have.rank) + ", alpha " +
                     std::to_string(have.alpha) + ") or sit on other projections"};
      reattach = true;
    }
  }
  const std::string path = (fs::path(dir) / adapter_weights_file).string();
  auto file = safetensors_file::open(path);
  if (!file) return file.err();
  // Everything is checked before the model changes.
  std::vector<std::pair<std::string, const tensor_view*>> found;
  std::set<std::string> used;
  for (const auto& p : plan(model, *o)) {
    for (const char* part : {".lora_A.weight", ".lora_B.weight"}) {
      const std::string name = p.name + part;
      const bool is_a = part[6] == 'A';
      const std::vector<std::int64_t> shape = is_a ? std::vector<std::int64_t>{o->rank, p.in}
                                                   : std::vector<std::int64_t>{p.out, o->rank};
      const tensor_view* v = file->find(name);
      if (v == nullptr) return error{path + ": missing tensor '" + name + "'"};
      if (v->shape != shape)
        return error{path + ": tensor '" + name + "' has shape [" + std::to_string(v->shape.size() > 0 ? v->shape[0] : 0) +
                     ", " + std::to_string(v->shape.size() > 1 ? v->shape[1] : 0) + "], expected [" +
                     std::to_string(shape[0]) + ", " + std::to_string(shape[1]) + "]"};
      if (v->dtype != st_dtype::f32 && v->dtype != st_dtype::bf16 && v->dtype != st_dtype::f16 &&
          v->dtype != st_dtype::f64)
        return error{path + ": tensor '" + name + "' is not floating-point"};
      found.emplace_back(name, v);
      used.insert(name);
    }
  }
  for (const auto& v : file->tensors())
    if (!used.count(v.name)) return error{path + ": tensor '" + v.name + "' is not an adapter of this model"};
  if (reattach) remove_lora(model);
  if (!model.lora)
    if (auto s = attach_lora(model, *o); !s) return error{dir + ": " + s.message()};
  const auto named = named_lora_parameters(model);
  at::NoGradGuard no_grad;
  for (const auto& [name, v] : found) {
    auto t = to_tensor(*v);
    if (!t) return t.err();
    for (const auto& [n, param] : named)
      if (n == name) param.copy_(t.value());
  }
  return {};
}

}  // namespace

status load_lora(CausalLMImpl& model, const std::string& dir) { return load_lora_from(model, dir, false); }

status replace_lora(CausalLMImpl& model, const std::string& dir) { return load_lora_from(model, dir, true); }

}  // namespace kforge::model

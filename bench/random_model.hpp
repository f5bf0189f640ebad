#pragma once
// What the model benches share: a random Qwen2 checkpoint in a given shape (Qwen2.5-0.5B's by
// default, or one named by --shape), written the way transformers initialises one, the
// median/min/max of repeated runs, and the CUDA caching allocator's peak memory (zeros where
// LibTorch has no CUDA: KFORGE_BENCH_TORCH_CUDA unset).
// Includes LibTorch (model/transformer.hpp).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#if defined(KFORGE_BENCH_TORCH_CUDA)
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include "model/config.hpp"
#include "model/safetensors.hpp"
#include "model/torch_cache.hpp"
#include "model/transformer.hpp"

namespace kforge::bench {

using json = nlohmann::json;

struct shape {  // Qwen2.5-0.5B's, by default
  std::int64_t hidden = 896, layers = 24, heads = 14, kv_heads = 2, intermediate = 4864, vocab = 151936;
  std::int64_t bos = 151643, eos = 151643;
  bool tied = true;  ///< tie_word_embeddings: the output head is the input embedding
};

/// The real models' shapes a bench can be asked for by name (their config.json's sizes).
inline const std::vector<std::pair<std::string, shape>>& named_shapes() {
  static const std::vector<std::pair<std::string, shape>> all = {
      {"qwen2.5-0.5b", shape{}},
      {"qwen2.5-coder-7b", shape{3584, 28, 28, 4, 18944, 152064, 151643, 151643, /*tied=*/false}},
  };
  return all;
}

inline std::optional<shape> shape_named(const std::string& name) {
  for (const auto& [n, s] : named_shapes())
    if (n == name) return s;
  return std::nullopt;
}

struct spread {
  double median = 0, min = 0, max = 0;
  static spread of(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return {n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2, v.front(), v.back()};
  }
  json to_json() const { return {{"median", median}, {"min", min}, {"max", max}}; }
};

inline json config_json(const shape& s) {
  return {{"architectures", {"Qwen2ForCausalLM"}},
          {"model_type", "qwen2"},
          {"hidden_size", s.hidden},
          {"intermediate_size", s.intermediate},
          {"num_hidden_layers", s.layers},
          {"num_attention_heads", s.heads},
          {"num_key_value_heads", s.kv_heads},
          {"vocab_size", s.vocab},
          {"max_position_embeddings", 32768},
          {"rms_norm_eps", 1e-6},
          {"rope_theta", 1000000.0},  // transformers 4.x reads this, 5.x rope_parameters
          {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 1000000.0}}},
          {"tie_word_embeddings", s.tied},
          {"hidden_act", "silu"},
          {"attention_dropout", 0.0},
          {"initializer_range", 0.02},
          {"use_sliding_window", false},
          {"sliding_window", nullptr},
          {"max_window_layers", s.layers},
          {"use_cache", true},
          {"bos_token_id", s.bos},
          {"eos_token_id", s.eos},
          {"torch_dtype", "bfloat16"}};
}

/// Every parameter of `config`'s model, Hugging Face name and shape, in the model's order. Read off
/// a model of one decoder layer (every layer has layer 0's parameters under its own index): building
/// a whole 7B model on the CPU, which LibTorch's modules initialise as they are built, takes a minute.
inline std::vector<std::pair<std::string, std::vector<std::int64_t>>> parameter_shapes(model::model_config config) {
  const std::int64_t layers = config.num_hidden_layers;
  config.num_hidden_layers = 1;
  const model::CausalLM one(config);
  const std::string first = "model.layers.0.";
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> before, layer, after;
  for (const auto& p : one->named_parameters(/*recurse=*/true)) {
    if (p.key().rfind(first, 0) == 0) layer.emplace_back(p.key().substr(first.size()), p.value().sizes().vec());
    else (layer.empty() ? before : after).emplace_back(p.key(), p.value().sizes().vec());
  }
  for (std::int64_t i = 0; i < layers; ++i)
    for (const auto& [name, sizes] : layer)
      before.emplace_back("model.layers." + std::to_string(i) + "." + name, sizes);
  before.insert(before.end(), after.begin(), after.end());
  return before;
}

/// DIR/config.json in shape `s` and random bf16 weights (normal, std 0.02; norms 1; biases 0) as a
/// Hugging Face checkpoint directory. The weights are drawn in bf16 on `device` (a GPU draws a
/// 7B model's in well under a second, where the CPU takes minutes), from its default generator
/// seeded with a fixed seed.
inline kforge::status write_random_checkpoint(const shape& s, const std::string& dir, at::Device device = at::kCPU) {
  std::ofstream(std::filesystem::path(dir) / "config.json") << config_json(s).dump(2) << "\n";
  auto config = model::load_model_config(dir);
  if (!config) return config.err();
  at::Generator gen = at::globalContext().defaultGenerator(device);
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_current_seed(1234);
  }
  std::vector<at::Tensor> keep;  // the CPU copies, alive until written
  std::vector<model::tensor_bytes> entries;
  for (const auto& [name, sizes] : parameter_shapes(config.value())) {
    at::Tensor t = at::empty(sizes, at::TensorOptions().dtype(at::kBFloat16).device(device));
    if (name.find("norm") != std::string::npos) t.fill_(1.0);
    else if (name.find(".bias") != std::string::npos) t.zero_();
    else t.normal_(0.0, 0.02, gen);
    keep.push_back(t.to(at::kCPU));
    entries.push_back({name, model::st_dtype::bf16, sizes, keep.back().data_ptr(),
                       static_cast<std::size_t>(t.nbytes())});
  }
  return model::write_safetensors((std::filesystem::path(dir) / "model.safetensors").string(), entries,
                                  {{"format", "pt"}});
}

/// The CUDA caching allocator's high-water marks since reset_peak_memory (bytes; zeros on the CPU).
struct peak_memory {
  std::int64_t allocated = 0, reserved = 0;
};

/// Starts the high-water marks afresh at what is allocated and reserved now.
inline void reset_peak_memory([[maybe_unused]] const at::Device& dev) {
#if defined(KFORGE_BENCH_TORCH_CUDA)
  if (dev.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(dev.index());
#endif
}

inline peak_memory read_peak_memory([[maybe_unused]] const at::Device& dev) {
  peak_memory p;
#if defined(KFORGE_BENCH_TORCH_CUDA)
  if (dev.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(dev.index());
    p.allocated = stats.allocated_bytes[0].peak;  // [0]: StatType::AGGREGATE, all pools
    p.reserved = stats.reserved_bytes[0].peak;
  }
#endif
  return p;
}

/// Bytes allocated on `dev` now (0 on the CPU).
inline std::int64_t allocated_memory([[maybe_unused]] const at::Device& dev) {
#if defined(KFORGE_BENCH_TORCH_CUDA)
  if (dev.is_cuda())
    return c10::cuda::CUDACachingAllocator::getDeviceStats(dev.index()).allocated_bytes[0].current;
#endif
  return 0;
}

inline double gib(std::int64_t bytes) { return static_cast<double>(bytes) / (1 << 30); }

}  // namespace kforge::bench

// The LibTorch half of pretrain.hpp: the model, its init, the training loop and the checkpoint.
#include "trainer/pretrain.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/cuda.h>
#include <torch/optim/adamw.h>
#include <torch/version.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <ostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/file_writer.hpp"
#include "common/hash.hpp"
#include "common/text_file.hpp"
#include "model/config.hpp"
#include "model/transformer.hpp"
#include "model/weights.hpp"
#include "trainer/checkpoint.hpp"

namespace kforge::trainer {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::int64_t padded_vocab(const pretrain_options& o, const sft_format& f) {
  const std::int64_t v = f.tok.vocab_size();
  return (v + o.vocab_multiple - 1) / o.vocab_multiple * o.vocab_multiple;
}

/// A Qwen2 config.json as transformers writes one (the keys model/config.cpp reads, and the ones
/// transformers needs to build the same model).
json config_json(const pretrain_options& o, const sft_format& f, std::int64_t vocab) {
  json c = {{"architectures", {"Qwen2ForCausalLM"}},
            {"model_type", "qwen2"},
            {"hidden_size", o.hidden_size},
            {"intermediate_size", o.intermediate_size},
            {"num_hidden_layers", o.num_layers},
            {"num_attention_heads", o.num_heads},
            {"num_key_value_heads", o.num_kv_heads},
            {"max_position_embeddings", o.max_positions},
            {"rms_norm_eps", o.rms_norm_eps},
            {"rope_theta", o.rope_theta},
            {"hidden_act", "silu"},
            {"tie_word_embeddings", o.tie_embeddings},
            {"vocab_size", vocab},
            {"torch_dtype", o.save_bf16 ? "bfloat16" : "float32"},
            {"use_sliding_window", false},
            {"sliding_window", nullptr},
            {"max_window_layers", o.num_layers},
            {"attention_dropout", 0.0},
            {"initializer_range", o.init_std},
            {"use_cache", true},
            {"eos_token_id", f.eos},
            {"pad_token_id", f.pad}};
  c["bos_token_id"] = f.bos ? json(*f.bos) : json(nullptr);
  return c;
}

/// Hugging Face's Qwen2 init from `seed` alone: one CPU generator drawn in parameter order, so the
/// same seed gives the same bits whatever the global generator did before.
void init_weights(model::CausalLMImpl& m, std::uint64_t seed, double std_dev) {
  at::NoGradGuard no_grad;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  for (auto& item : m.named_parameters(/*recurse=*/true)) {
    at::Tensor p = item.value();
    if (p.dim() == 1 && ends_with(item.key(), "norm.weight")) {
      p.fill_(1.0);
    } else if (ends_with(item.key(), ".bias")) {
      p.zero_();
    } else {
      p.normal_(0.0, std_dev, gen);
    }
  }
}

/// A batch as tensors: right-padded ids, and the flat positions ([B * L] indexing) whose hidden
/// state predicts a target, with those targets.
struct batch_tensors {
  at::Tensor ids;        ///< [B, L] int64
  at::Tensor positions;  ///< [N] int64 into the flattened [B * L]
  at::Tensor targets;    ///< [N] int64
  at::Tensor weights;    ///< [N] float: the training loss's weight of each target (undefined: all 1)
  std::int64_t tokens = 0;   ///< non-padding tokens
  std::int64_t n_targets = 0;
};

/// Whether any target can weigh other than 1 (pretrain_options::lead_tokens, focus_weight).
bool weights_targets(const pretrain_options& o) {
  return (o.lead_tokens > 0 && o.lead_weight != 1.0) || (!o.focus_from.empty() && o.focus_weight != 1.0);
}

/// The summed training-loss weight of one example's targets (target_weight of each).
double example_weight(const sft_example& ex, const pretrain_options& o) {
  if (!weights_targets(o)) return static_cast<double>(target_count(ex));
  double w = 0;
  for (const auto& [first, end] : target_spans(ex))
    for (std::int64_t t = first; t < end; ++t) w += target_weight(ex, t, o);
  return w;
}

/// `weighting`: the options whose target weights the batch carries; null: every target weighs 1.
batch_tensors make_batch(const std::vector<std::size_t>& rows, const sft_dataset& d, std::int64_t pad,
                         const at::Device& dev, const pretrain_options* weighting = nullptr) {
  std::int64_t len = 0;
  for (auto r : rows) len = std::max(len, static_cast<std::int64_t>(d.examples[r].ids.size()));
  const auto b = static_cast<std::int64_t>(rows.size());
  batch_tensors out;
  at::Tensor ids = at::full({b, len}, pad, at::kLong);
  auto acc = ids.accessor<std::int64_t, 2>();
  std::vector<std::int64_t> pos, tgt;
  std::vector<float> wts;
  const bool weighted = weighting != nullptr && weights_targets(*weighting);
  for (std::int64_t i = 0; i < b; ++i) {
    const sft_example& ex = d.examples[rows[static_cast<std::size_t>(i)]];
    const auto n = static_cast<std::int64_t>(ex.ids.size());
    for (std::int64_t t = 0; t < n; ++t) acc[i][t] = ex.ids[static_cast<std::size_t>(t)];
    out.tokens += n;
    // Target t (target_mask(ex)[t] == 1: t >= 1, past the prompt, in a trained turn) is predicted
    // by the hidden state at t - 1.
    for (const auto& [first, end] : target_spans(ex))
      for (std::int64_t t = first; t < end; ++t) {
        pos.push_back(i * len + t - 1);
        tgt.push_back(ex.ids[static_cast<std::size_t>(t)]);
        if (weighted) wts.push_back(static_cast<float>(target_weight(ex, t, *weighting)));
      }
  }
  out.n_targets = static_cast<std::int64_t>(pos.size());
  const auto n = out.n_targets;
  out.ids = ids.to(dev);
  out.positions = at::from_blob(pos.data(), {n}, at::kLong).clone().to(dev);
  out.targets = at::from_blob(tgt.data(), {n}, at::kLong).clone().to(dev);
  if (weighted) out.weights = at::from_blob(wts.data(), {n}, at::kFloat).clone().to(dev);
  return out;
}

/// Summed cross-entropy (fp32) of the batch's targets: plain, and weighted by b.weights (the same
/// tensor when the batch has no weights). The output projection is applied to the target
/// positions only: the prompt's logits ([tokens, vocab], the largest tensor of a step) are never
/// built.
struct batch_loss {
  at::Tensor plain, weighted;
};

batch_loss summed_loss(model::CausalLMImpl& m, const batch_tensors& b) {
  if (b.n_targets == 0) {
    const auto zero = at::zeros({}, b.ids.options().dtype(at::kFloat));
    return {zero, zero};
  }
  const at::Tensor h = m.model->forward(b.ids, {});  // [B, L, H]
  const at::Tensor sel = h.reshape({-1, h.size(-1)}).index_select(0, b.positions);
  const at::Tensor logits = at::matmul(sel, m.output_weight().t()).to(at::kFloat);
  if (!b.weights.defined()) {
    const at::Tensor sum = at::cross_entropy_loss(logits, b.targets, {}, at::Reduction::Sum);
    return {sum, sum};
  }
  const at::Tensor each = at::cross_entropy_loss(logits, b.targets, {}, at::Reduction::None);
  return {each.sum(), (each * b.weights).sum()};
}

double clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm) {
  std::vector<at::Tensor> norms;
  for (const auto& p : params)
    if (p.grad().defined()) norms.push_back(p.grad().detach().norm(2).to(at::kDouble));
  if (norms.empty()) return 0.0;
  const double total = at::stack(norms).norm(2).item<double>();
  if (max_norm > 0 && std::isfinite(total) && total > max_norm) {
    const double scale = max_norm / (total + 1e-6);
    for (const auto& p : params)
      if (p.grad().defined()) p.grad().detach().mul_(scale);
  }
  return total;
}

/// Removes `<out>.tmp` unless the run got as far as renaming it.
struct tmp_dir_guard {
  std::string path;
  bool keep = false;
  ~tmp_dir_guard() {
    if (keep || path.empty()) return;
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

json options_json(const pretrain_options& o) {
  return {{"data", o.data},
          {"tokenizer_dir", o.tokenizer_dir},
          {"out", o.out},
          {"overwrite", o.overwrite},
          {"hidden_size", o.hidden_size},
          {"num_layers", o.num_layers},
          {"num_heads", o.num_heads},
          {"num_kv_heads", o.num_kv_heads},
          {"intermediate_size", o.intermediate_size},
          {"max_positions", o.max_positions},
          {"rope_theta", o.rope_theta},
          {"rms_norm_eps", o.rms_norm_eps},
          {"tie_embeddings", o.tie_embeddings},
          {"vocab_multiple", o.vocab_multiple},
          {"init_std", o.init_std},
          {"init_from", o.init_from},
          {"seed", o.seed},
          {"max_len", o.max_len},
          {"max_completion_tokens", o.max_completion_tokens},
          {"val_fraction", o.val_fraction},
          {"batch_size", o.batch_size},
          {"batch_tokens", o.batch_tokens},
          {"micro_batch_tokens", o.micro_batch_tokens},
          {"steps", o.steps},
          {"epochs", o.epochs},
          {"lr", o.lr},
          {"min_lr_ratio", o.min_lr_ratio},
          {"warmup_fraction", o.warmup_fraction},
          {"beta1", o.beta1},
          {"beta2", o.beta2},
          {"adam_eps", o.adam_eps},
          {"weight_decay", o.weight_decay},
          {"max_grad_norm", o.max_grad_norm},
          {"lead_tokens", o.lead_tokens},
          {"lead_weight", o.lead_weight},
          {"focus_from", o.focus_from},
          {"focus_to", o.focus_to},
          {"focus_weight", o.focus_weight},
          {"device", o.device},
          {"bf16", o.bf16},
          {"log_every", o.log_every},
          {"eval_every", o.eval_every},
          {"save_bf16", o.save_bf16}};
}

std::string file_hash(const std::string& path) {
  auto text = read_text_file(path);
  if (!text) return "";
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(fnv1a64(*text)));
  return std::string("fnv1a64:") + buf;
}

json finite_or_null(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }


/// Every training step's rows and the validation batches, fixed before training: the schedule
/// needs the step count, and a plan fixed by (seed, epoch) alone keeps runs reproducible.
struct batch_plan {
  std::vector<std::vector<std::size_t>> steps;
  std::int64_t first_epoch_batches = 0;
  std::vector<std::vector<std::size_t>> val;  ///< length-sorted, so that their padding is small
};

batch_plan plan_batches(const pretrain_options& o, const data_split& split, const std::vector<std::int64_t>& lengths) {
  batch_plan plan;
  for (std::int64_t epoch = 0;; ++epoch) {
    auto batches = plan_epoch(split.train, lengths, o.batch_size, o.batch_tokens, o.seed, epoch);
    if (epoch == 0) plan.first_epoch_batches = static_cast<std::int64_t>(batches.size());
    for (auto& b : batches) plan.steps.push_back(std::move(b));
    if (o.steps > 0 ? static_cast<std::int64_t>(plan.steps.size()) >= o.steps : epoch + 1 >= o.epochs) break;
  }
  if (o.steps > 0) plan.steps.resize(static_cast<std::size_t>(o.steps));

  std::vector<std::size_t> v = split.val;
  std::stable_sort(v.begin(), v.end(), [&](std::size_t a, std::size_t b) { return lengths[a] < lengths[b]; });
  const std::int64_t budget = o.micro_batch_tokens > 0 ? o.micro_batch_tokens : o.batch_tokens;
  if (budget > 0) {
    plan.val = cut_by_tokens(v, lengths, budget);
    return plan;
  }
  const auto size = static_cast<std::size_t>(o.batch_size);
  for (std::size_t i = 0; i < v.size(); i += size)
    plan.val.emplace_back(v.begin() + static_cast<std::ptrdiff_t>(i),
                          v.begin() + static_cast<std::ptrdiff_t>(std::min(v.size(), i + size)));
  return plan;
}

/// What is trained: fp32 master weights, the model forward and backward run on (the masters
/// themselves, or with bf16 compute their bf16 copy), and AdamW over the masters (no decay on
/// vectors).
struct trained_model {
  model::CausalLM master{nullptr};
  model::CausalLM compute{nullptr};
  std::vector<at::Tensor> master_params, compute_params;
  std::unique_ptr<torch::optim::AdamW> adamw;
  bool mixed = false;
};

/// Masters initialised on the CPU (bit-identical for a seed), or --init's, then moved to `dev`.
result<trained_model> make_trained_model(const pretrain_options& o, const model::model_config& cfg,
                                         const at::Device& dev, bool mixed) {
  trained_model m;
  m.mixed = mixed;
  if (o.init_from.empty()) {
    m.master = model::CausalLM(cfg);
    init_weights(*m.master, o.seed, o.init_std);
  } else {
    auto start = model::load_causal_lm(o.init_from);  // fp32 on the CPU, checked tensor by tensor
    if (!start) return error{"--init " + o.init_from + ": " + start.message()};
    m.master = std::move(*start);
    for (auto& p : m.master->parameters()) p.set_requires_grad(true);
  }
  m.master->to(dev, at::kFloat);
  m.master->train();
  m.master_params = m.master->parameters(/*recurse=*/true);

  m.compute = m.master;
  m.compute_params = m.master_params;
  if (mixed) {
    m.compute = model::CausalLM(cfg);
    m.compute->to(dev, at::kBFloat16);
    m.compute->train();
    m.compute_params = m.compute->parameters(/*recurse=*/true);
    at::NoGradGuard no_grad;
    for (std::size_t i = 0; i < m.compute_params.size(); ++i) m.compute_params[i].copy_(m.master_params[i]);
  }

  std::vector<at::Tensor> decay, no_decay;
  for (const auto& p : m.master_params) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  auto adam_options = [&](double wd) {
    return torch::optim::AdamWOptions(o.lr).betas(std::make_tuple(o.beta1, o.beta2)).eps(o.adam_eps).weight_decay(wd);
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  if (!decay.empty())
    groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(adam_options(o.weight_decay)));
  if (!no_decay.empty())
    groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(adam_options(0.0)));
  m.adamw = std::make_unique<torch::optim::AdamW>(std::move(groups), adam_options(o.weight_decay));
  return m;
}

/// The mean loss per target token over the validation batches; -1 without any.
double validation_loss(trained_model& m, const std::vector<std::vector<std::size_t>>& batches,
                       const sft_dataset& data, std::int64_t pad, const at::Device& dev) {
  if (batches.empty()) return -1;
  at::NoGradGuard no_grad;
  m.compute->eval();
  at::Tensor sum = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(dev));
  std::int64_t n = 0;
  for (const auto& rows : batches) {
    const batch_tensors b = make_batch(rows, data, pad, dev);
    sum += summed_loss(*m.compute, b).plain.to(at::kDouble);
    n += b.n_targets;
  }
  m.compute->train();
  return n > 0 ? sum.item<double>() / static_cast<double>(n) : -1;
}

/// Loss and token counts summed since the last logged step.
struct loss_window {
  at::Tensor loss;
  std::int64_t targets = 0, tokens = 0;
  clock_type::time_point start = clock_type::now();
  double eval_seconds = 0;  ///< validation inside the window is not training time
};

/// The gradients of one step's rows, micro-batch by micro-batch, each weighted by the whole
/// batch's target weight; their losses and tokens added to `w`. Returns the tokens.
std::int64_t accumulate_gradients(trained_model& m, const std::vector<std::size_t>& rows, const sft_dataset& data,
                                  const pretrain_options& o, std::int64_t pad, const at::Device& dev,
                                  const std::vector<std::int64_t>& lengths, const std::vector<double>& weights,
                                  loss_window& w) {
  double batch_weight = 0;
  for (auto r : rows) batch_weight += weights[r];
  const double weight_denom = std::max(batch_weight, 1.0);
  std::int64_t tokens = 0;
  for (const auto& mb : cut_by_tokens(rows, lengths, o.micro_batch_tokens)) {
    const batch_tensors b = make_batch(mb, data, pad, dev, &o);
    const batch_loss loss = summed_loss(*m.compute, b);
    (loss.weighted / weight_denom).backward();
    w.loss += loss.plain.detach().to(at::kDouble);
    w.targets += b.n_targets;
    w.tokens += b.tokens;
    tokens += b.tokens;
  }
  return tokens;
}

/// Clips the summed gradients and steps the masters (a bf16 copy's gradients moved to them first,
/// and the copy refreshed after); a step whose gradient norm is not finite leaves the weights
/// alone. Returns the norm.
double apply_gradients(trained_model& m, double max_grad_norm) {
  if (m.mixed) {
    at::NoGradGuard no_grad;
    for (std::size_t i = 0; i < m.master_params.size(); ++i) {
      const at::Tensor& g = m.compute_params[i].grad();
      if (!g.defined()) continue;
      if (!m.master_params[i].grad().defined()) m.master_params[i].mutable_grad() = at::zeros_like(m.master_params[i]);
      m.master_params[i].grad().copy_(g);
      m.compute_params[i].grad().zero_();
    }
  }
  const double norm = clip_grad_norm(m.master_params, max_grad_norm);
  if (std::isfinite(norm)) {
    m.adamw->step();
    if (m.mixed) {
      at::NoGradGuard no_grad;
      for (std::size_t i = 0; i < m.master_params.size(); ++i) m.compute_params[i].copy_(m.master_params[i]);
    }
  }
  m.adamw->zero_grad();
  return norm;
}

/// The console line of a logged step.
std::string step_message(const json& line, std::int64_t total, const pretrain_report& rep) {
  std::ostringstream msg;
  msg.precision(4);
  msg << "step " << line["step"].get<std::int64_t>() << "/" << total;
  if (line.contains("loss")) msg << " loss " << rep.final_train_loss;
  if (line.contains("val_loss")) msg << " val " << rep.final_val_loss;
  msg << " lr " << line["lr"].get<double>() << " grad_norm " << rep.last_grad_norm;
  if (line.contains("tokens_per_s")) msg << " " << static_cast<std::int64_t>(line["tokens_per_s"].get<double>()) << " tok/s";
  return msg.str();
}

/// The checkpoint's files beside the weights: config, generation config, the tokenizer's files.
status write_checkpoint_files(const fs::path& dir, const json& cfg_json, const pretrain_options& o,
                              const sft_format& fmt) {
  if (auto s = write_text_file_atomically((dir / "config.json").string(), cfg_json.dump(2) + "\n"); !s) return s;
  json gen = {{"eos_token_id", fmt.eos}, {"pad_token_id", fmt.pad}};
  if (fmt.bos) gen["bos_token_id"] = *fmt.bos;
  if (auto s = write_text_file_atomically((dir / "generation_config.json").string(), gen.dump(2) + "\n"); !s)
    return s;
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}) {
    const fs::path from = fs::path(o.tokenizer_dir) / name;
    std::error_code ec;
    if (!fs::exists(from, ec)) continue;
    fs::copy_file(from, dir / name, fs::copy_options::overwrite_existing, ec);
    if (ec) return error{(dir / name).string() + ": cannot copy from " + from.string() + ": " + ec.message()};
  }
  return {};
}

/// pretrain.json: the command, options, data, tokenizer, model and training figures of the run.
json pretrain_record(const pretrain_options& o, const sft_format& fmt, const sft_dataset& data,
                     const pretrain_report& rep, std::int64_t vocab, bool mixed) {
  return {{"kforge_pretrain", 1},
          {"command", o.command},
          {"options", options_json(o)},
          {"data",
           {{"path", o.data},
            {"hash", data.hash},
            {"bytes", data.bytes},
            {"records", data.records},
            {"examples", static_cast<std::int64_t>(data.examples.size())},
            {"dropped_too_long", data.dropped_too_long},
            {"longest_dropped", data.longest_dropped},
            {"dropped_long_completion", data.dropped_long_completion},
            {"longest_completion_dropped", data.longest_completion_dropped},
            {"tokens", data.tokens},
            {"target_tokens", data.target_tokens},
            {"train_examples", rep.train_examples},
            {"val_examples", rep.val_examples}}},
          {"tokenizer",
           {{"dir", o.tokenizer_dir},
            {"tokenizer_json_hash", file_hash((fs::path(o.tokenizer_dir) / "tokenizer.json").string())},
            {"chat_format", std::string(fmt.chat.name())},
            {"eos_token_id", fmt.eos},
            {"pad_token_id", fmt.pad},
            {"tokenizer_vocab", fmt.tok.vocab_size()}}},
          {"model", {{"parameters", rep.parameters}, {"vocab_size", vocab}, {"saved_dtype", o.save_bf16 ? "bfloat16" : "float32"}}},
          {"training",
           {{"device", rep.device},
            {"compute_dtype", mixed ? "bfloat16 (fp32 master weights)" : "float32"},
            {"torch_version", TORCH_VERSION},
            {"steps", rep.steps},
            {"skipped_steps", rep.skipped_steps},
            {"epochs", rep.epochs},
            {"first_train_loss", finite_or_null(rep.first_train_loss)},
            {"final_train_loss", finite_or_null(rep.final_train_loss)},
            {"final_val_loss", rep.final_val_loss >= 0 ? finite_or_null(rep.final_val_loss) : json(nullptr)},
            {"tokens", rep.tokens},
            {"seconds", rep.seconds},
            {"tokens_per_second", rep.tokens_per_second}}}};
}

}  // namespace

result<std::string> resolve_device(const std::string& d) {
  if (d == "cpu") return std::string("cpu");
  const int n = torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
  if (d == "auto") return std::string(n > 0 ? "cuda:0" : "cpu");
  int index = 0;
  if (d.rfind("cuda:", 0) == 0) {
    try {
      index = std::stoi(d.substr(5));
    } catch (const std::exception&) {
      return error{"--device '" + d + "': expected auto, cpu, cuda or cuda:N"};
    }
  } else if (d != "cuda") {
    return error{"--device '" + d + "': expected auto, cpu, cuda or cuda:N"};
  }
  if (n == 0)
    return error{"--device " + d + ": LibTorch sees no CUDA device (LibTorch " + TORCH_VERSION +
                 (torch::cuda::is_available() ? "" : ", a CPU build or no driver") + ")"};
  if (index >= n)
    return error{"--device " + d + ": LibTorch sees " + std::to_string(n) + " CUDA device(s)"};
  return "cuda:" + std::to_string(index);
}

result<pretrain_options> with_init_shape(const pretrain_options& o, const sft_format& fmt) {
  if (o.init_from.empty()) return o;
  auto c = model::load_model_config(o.init_from);
  if (!c) return error{"--init " + o.init_from + ": " + c.message()};
  if (c->arch != model::architecture::qwen2)
    return error{"--init " + o.init_from + ": a " + c->architecture_name + ", not a Qwen2 this command wrote"};
  pretrain_options s = o;
  s.hidden_size = c->hidden_size;
  s.num_layers = c->num_hidden_layers;
  s.num_heads = c->num_attention_heads;
  s.num_kv_heads = c->num_key_value_heads;
  s.intermediate_size = c->intermediate_size;
  s.max_positions = c->max_position_embeddings;
  s.rope_theta = c->rope_theta;
  s.rms_norm_eps = c->rms_norm_eps;
  s.tie_embeddings = c->tie_word_embeddings;
  if (c->vocab_size != padded_vocab(s, fmt))
    return error{"--init " + o.init_from + ": vocab_size " + std::to_string(c->vocab_size) + ", and --tokenizer " +
                 o.tokenizer_dir + " gives " + std::to_string(padded_vocab(s, fmt)) +
                 ": it was trained with another tokenizer"};
  if (s.max_positions < s.max_len)
    return error{"--init " + o.init_from + ": max_position_embeddings " + std::to_string(s.max_positions) +
                 " is below --max-len " + std::to_string(s.max_len)};
  return s;
}

result<pretrain_report> run_pretrain(const pretrain_options& options, const sft_format& fmt, const sft_dataset& data,
                                     std::ostream* log) {
  auto shaped = with_init_shape(options, fmt);
  if (!shaped) return shaped.err();
  const pretrain_options& o = *shaped;
  if (auto s = validate(o); !s) return s.err();
  if (auto s = check_output_dir(o); !s) return s.err();
  auto device_name = resolve_device(o.device);
  if (!device_name) return device_name.err();

  pretrain_report rep;
  rep.device = *device_name;
  const at::Device dev(*device_name);
  const bool mixed = dev.is_cuda() && o.bf16;

  auto tmp = begin_checkpoint_dir(o.out);
  if (!tmp) return tmp.err();
  tmp_dir_guard guard{*tmp};
  const fs::path dir(*tmp);

  // The config is parsed back by the model's own reader: a checkpoint it could not load fails here,
  // before any training.
  const std::int64_t vocab = padded_vocab(o, fmt);
  const json cfg_json = config_json(o, fmt, vocab);
  auto cfg = model::parse_model_config(cfg_json.dump(), "config.json (generated)");
  if (!cfg) return cfg.err();

  const data_split split = split_examples(data.examples.size(), o.val_fraction, o.seed);
  rep.train_examples = static_cast<std::int64_t>(split.train.size());
  rep.val_examples = static_cast<std::int64_t>(split.val.size());
  std::vector<std::int64_t> lengths;
  std::vector<double> weights;  // each example's summed target weight, the loss's denominator
  for (const auto& ex : data.examples) {
    lengths.push_back(static_cast<std::int64_t>(ex.ids.size()));
    weights.push_back(example_weight(ex, o));
  }
  const batch_plan plan = plan_batches(o, split, lengths);
  const auto total = static_cast<std::int64_t>(plan.steps.size());
  auto epochs_at = [&](std::int64_t steps) {
    return plan.first_epoch_batches > 0 ? static_cast<double>(steps) / static_cast<double>(plan.first_epoch_batches)
                                        : 0.0;
  };

  // A whole line per logged step; a refused one stops the run, naming the file.
  auto train_log = file_writer::open((dir / "train_log.jsonl").string(), file_writer::mode::truncate);
  if (!train_log) return train_log.err();

  const auto started = clock_type::now();
  try {
    auto m = make_trained_model(o, *cfg, dev, mixed);
    if (!m) return m.err();
    for (const auto& p : m->master_params) rep.parameters += p.numel();
    if (log != nullptr)
      *log << "pretrain: " << rep.parameters << " parameters, " << rep.train_examples << " train / "
           << rep.val_examples << " validation examples, " << total << " steps on " << rep.device
           << (mixed ? " (bf16 compute, fp32 master weights)" : " (fp32)") << "\n";

    loss_window window{at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(dev))};
    for (std::int64_t step = 0; step < total; ++step) {
      const double lr = lr_at(o, step, total);
      for (auto& g : m->adamw->param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
      const auto& rows = plan.steps[static_cast<std::size_t>(step)];
      rep.tokens += accumulate_gradients(*m, rows, data, o, fmt.pad, dev, lengths, weights, window);
      if (step == 0) {
        std::int64_t targets = 0;
        for (auto r : rows) targets += target_count(data.examples[r]);
        rep.first_train_loss = window.loss.item<double>() / static_cast<double>(std::max<std::int64_t>(targets, 1));
      }
      rep.last_grad_norm = apply_gradients(*m, o.max_grad_norm);
      if (!std::isfinite(rep.last_grad_norm)) ++rep.skipped_steps;  // a diverged step must not reach the weights
      rep.steps = step + 1;

      const bool last = step + 1 == total;
      const bool log_now = (step + 1) % o.log_every == 0 || last;
      const bool eval_now = !plan.val.empty() && ((o.eval_every > 0 && (step + 1) % o.eval_every == 0) || last);
      if (!log_now && !eval_now) continue;
      json line = {{"step", step + 1}, {"lr", lr}, {"grad_norm", finite_or_null(rep.last_grad_norm)}};
      line["epoch"] = epochs_at(step + 1);
      if (log_now && window.targets > 0) {
        const double seconds =
            std::chrono::duration<double>(clock_type::now() - window.start).count() - window.eval_seconds;
        rep.final_train_loss = window.loss.item<double>() / static_cast<double>(window.targets);
        line["loss"] = finite_or_null(rep.final_train_loss);
        line["target_tokens"] = window.targets;
        line["tokens_per_s"] = seconds > 0 ? static_cast<double>(window.tokens) / seconds : 0.0;
        window.loss.zero_();
        window.targets = window.tokens = 0;
        window.eval_seconds = 0;
        window.start = clock_type::now();
      }
      line["tokens"] = rep.tokens;
      line["skipped_steps"] = rep.skipped_steps;
      if (eval_now) {
        const auto eval_start = clock_type::now();
        rep.final_val_loss = validation_loss(*m, plan.val, data, fmt.pad, dev);
        window.eval_seconds += std::chrono::duration<double>(clock_type::now() - eval_start).count();
        line["val_loss"] = finite_or_null(rep.final_val_loss);
      }
      line["elapsed_s"] = std::chrono::duration<double>(clock_type::now() - started).count();
      if (auto s = train_log->append(line.dump() + "\n"); !s) return s.err();
      if (log != nullptr) *log << step_message(line, total, rep) << "\n" << std::flush;
    }
    rep.seconds = std::chrono::duration<double>(clock_type::now() - started).count();
    rep.tokens_per_second = rep.seconds > 0 ? static_cast<double>(rep.tokens) / rep.seconds : 0;
    rep.epochs = epochs_at(rep.steps);

    if (auto s = train_log->sync(); !s) return s.err();
    if (auto s = train_log->close(); !s) return s.err();

    m->master->to(at::kCPU, o.save_bf16 ? at::kBFloat16 : at::kFloat);
    if (auto s = model::save_weights(*m->master, (dir / "model.safetensors").string()); !s) return s.err();
    if (auto s = write_checkpoint_files(dir, cfg_json, o, fmt); !s) return s.err();
    const json record = pretrain_record(o, fmt, data, rep, vocab, mixed);
    if (auto s = write_text_file_atomically((dir / "pretrain.json").string(), record.dump(2) + "\n"); !s)
      return s.err();
  } catch (const c10::Error& e) {
    return error{"pretrain: " + std::string(e.what_without_backtrace())};
  } catch (const std::exception& e) {
    return error{std::string("pretrain: ") + e.what()};
  }

  if (auto s = commit_checkpoint_dir(o.out); !s) return s.err();
  guard.keep = true;
  rep.out = o.out;
  return rep;
}

}  // namespace kforge::trainer

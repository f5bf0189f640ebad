// generate_bench: rollout throughput of the policy engine (model/generate.hpp) on one GPU, with
// Hugging Face transformers' generate() as the anchor, in the same run on the same model files.
//
//   generate_bench [--json FILE] [--shape NAME] [--reps R] [--layers L] [--batch P] [--samples N]
//                  [--prompt-len T] [--new-tokens K] [--lora-rank R] [--turns T [--turn-context C]]
//                  [--no-anchor] [--model DIR] [--profile] [--cpu-smoke [--qwen-shape] [--bf16]]
//
// --model DIR benches that checkpoint instead of the random 0.5B one (prompts are random ids in its
// vocabulary). --profile then decodes once more under model/op_profile.hpp and prints where the
// host's time went, op by op, per decoding step (in the JSON as "profile"). --shape NAME: the
// random model in another real model's shapes (bench/random_model.hpp: qwen2.5-0.5b, the default,
// or qwen2.5-coder-7b).
//
// --lora-rank R: then the engine samples with a random LoRA adapter of rank R (alpha 2R, B drawn
// so that it changes the model) on all seven projections, put on the way an engine sampler takes a
// published adapter (a PEFT directory through model::replace_lora, switched on): unmerged (each
// projection adds the adapter's product), then merged into the weights (model::merge_lora), R reps
// of each as for the base model; tokens/s, peak memory and merged / unmerged, in the JSON as
// "lora". Checked: the merged model scores the unmerged rows as they were sampled (the tolerance
// below).
//
// --turns T: then episodes' next turns beside the batch, as the engine sampler meets them: T contexts
// of C random ids (--turn-context, default 4096), one sample each, generated after the groups in a
// call of their own and then together with them in one call (model::sampling_options::prompt_n, the
// sampler's [sampler] batch_turns_with_groups); R reps of each, alternating; the seconds of each and
// together / apart, in the JSON as "turns", the joint call's rows checked as below.
//
// Model: random weights (normal, std 0.02; norms 1) in Qwen2.5-0.5B's shapes — hidden 896, 24
// layers, 14 query / 2 key-value heads of 64, MLP 4864, vocab 151936, tied embeddings, rope theta
// 1e6, RMS eps 1e-6 — written as a Hugging Face checkpoint directory (config.json +
// model.safetensors in bf16, drawn on the bench's device: bench/random_model.hpp) to a temporary
// directory that both sides load. Workload: P = 64 prompts of T = 128 random token ids, N = 8
// samples each (512 rows), exactly K = 512 new tokens (no stop tokens), temperature 1, top-p 1:
// one GRPO rollout batch.
//
// Ours: generate() in bf16 on cuda:0. A warm-up on the same batch with 16 new tokens, then R timed
// runs (default 2); tokens/s = P*N*K / wall time of the whole call (prefill included), peak memory
// from the CUDA caching allocator over the timed runs. Anchor: bench/hf_generate.py (sdpa
// attention, bf16, do_sample with top_k = 0, min_new_tokens = max_new_tokens = K, the same warm-up
// and R), as a subprocess after ours, with our model freed. Reported: median (min..max) of each
// side and the ratio of the medians ours/HF (the engine's goal: >= 2).
// Correctness while measuring: every row has K tokens inside the vocabulary with finite log-probs
// <= 0, and the scoring pass the trainer runs (score_batch) reproduces the sampled log-probs of
// two rows (bf16: mean |diff| < 0.05, max < 0.5; fp32: max < 1e-3). A failure exits 1.
//
// Without a GPU it prints SKIP and exits 0, unless --cpu-smoke: a tiny model (hidden 64, 2 layers,
// vocab 512; 2 prompts x 2 samples x 8 tokens, shrinkable further by the flags) in fp32 on the CPU,
// so the whole path runs anywhere; the anchor then runs on the CPU too when python3 has torch and
// transformers, and is skipped, saying so, when it has not. --qwen-shape keeps the real layer
// shapes there (with --layers 1 --batch 1 it fits a small machine) and --bf16 the GPU's dtype, to
// see the bf16 correctness check on a CPU.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <nlohmann/json.hpp>
#include <torch/cuda.h>

#include "bench/random_model.hpp"
#include "model/op_profile.hpp"
#include "common/subprocess.hpp"
#include "model/generate.hpp"
#include "model/lora.hpp"
#include "model/weights.hpp"

namespace fs = std::filesystem;
namespace km = kforge::model;
using json = nlohmann::json;
using clk = std::chrono::steady_clock;

using kforge::bench::config_json;
using kforge::bench::gib;
using kforge::bench::peak_memory;
using kforge::bench::shape;
using kforge::bench::spread;
using kforge::bench::write_random_checkpoint;

namespace {

struct workload {
  std::int64_t prompts = 64, samples = 8, prompt_len = 128, new_tokens = 512, warmup_tokens = 16;
  int reps = 4;  // transformers' first full-length call is ~3x slower (seen on the H200): the median of 4 is warm
};

std::vector<std::vector<std::int64_t>> random_prompts(const workload& w, std::int64_t vocab) {
  at::Generator gen = at::detail::createCPUGenerator(99);
  const at::Tensor t = at::randint(vocab, {w.prompts, w.prompt_len}, gen, at::TensorOptions().dtype(at::kLong));
  std::vector<std::vector<std::int64_t>> out;
  for (std::int64_t i = 0; i < w.prompts; ++i) {
    const auto* p = t[i].contiguous().data_ptr<std::int64_t>();
    out.emplace_back(p, p + w.prompt_len);
  }
  return out;
}

void sync(const at::Device& dev) {
  if (dev.is_cuda()) torch::cuda::synchronize(dev.index());
}

// How far a scoring pass's log-probs may lie from the sampled ones (mean and max |diff|, nats).
struct score_tolerance {
  double mean, max;
};
// The same weights in bf16: only the kernels' order of summation differs.
constexpr score_tolerance same_bf16{0.05, 0.5};
constexpr score_tolerance same_fp32{1e-3, 1e-3};
// A bf16 model with an adapter merged into its weights against it unmerged: every merged weight is
// rounded to bf16 anew, which moves the log-probs more than the order of summation (7B-shaped,
// rank 64, H200, 2026-12-06: mean 0.076, max 0.33). Wider bounds, still far below what a wrong
// merge does (an adapter moves the logits by whole units).
constexpr score_tolerance merged_bf16{0.15, 1.0};

// Every row ran K steps with sane log-probs, and the trainer's scoring pass agrees with the sampler.
json check(km::CausalLMImpl& model, const std::vector<std::vector<std::int64_t>>& prompts,
           const std::vector<km::generation>& gens, const workload& w, const score_tolerance& tol, bool& ok) {
  std::int64_t wrong_length = 0, bad_logprob = 0, bad_token = 0;
  for (const auto& g : gens) {
    wrong_length += static_cast<std::int64_t>(g.tokens.size()) != w.new_tokens;
    for (float lp : g.logprobs) bad_logprob += !(std::isfinite(lp) && lp <= 0.0f);
    for (auto t : g.tokens) bad_token += t < 0 || t >= model.config.vocab_size;
  }
  std::vector<km::score_item> items;
  for (std::size_t r : {std::size_t{0}, gens.size() - 1})
    items.push_back({prompts[gens[r].prompt], gens[r].tokens});
  double max_diff = -1, mean_diff = -1;
  if (wrong_length == 0) {  // the two rows' log-probs are then [K] each
    at::NoGradGuard no_grad;
    auto s = km::score_batch(model, items, {});
    if (s) {
      const at::Tensor sampled =
          at::stack({at::tensor(gens.front().logprobs), at::tensor(gens.back().logprobs)}).to(s->logprobs.device());
      const at::Tensor d = (s->logprobs - sampled).abs();
      max_diff = d.max().item<double>();
      mean_diff = d.mean().item<double>();
    } else {
      std::printf("check: score_batch failed: %s\n", s.message().c_str());
    }
  }
  const bool scores_ok = max_diff >= 0 && mean_diff <= tol.mean && max_diff <= tol.max;
  ok = wrong_length == 0 && bad_logprob == 0 && bad_token == 0 && scores_ok;
  std::printf("check: %zu rows, %lld with a length other than %lld, %lld bad log-probs, %lld bad tokens; "
              "score_batch vs sampled log-probs (2 rows): mean |diff| %.3g, max %.3g: %s\n",
              gens.size(), static_cast<long long>(wrong_length), static_cast<long long>(w.new_tokens),
              static_cast<long long>(bad_logprob), static_cast<long long>(bad_token), mean_diff, max_diff,
              ok ? "ok" : "FAILED");
  return {{"rows", gens.size()}, {"wrong_length", wrong_length}, {"bad_logprobs", bad_logprob},
          {"bad_tokens", bad_token}, {"score_mean_abs_diff", mean_diff}, {"score_max_abs_diff", max_diff},
          {"allowed_mean_abs_diff", tol.mean}, {"allowed_max_abs_diff", tol.max}, {"ok", ok}};
}

// One GRPO rollout's sampling: N samples a prompt, temperature 1, top-p 1, exactly `new_tokens`.
km::sampling_options sampling(const workload& w, std::uint64_t seed, std::int64_t new_tokens) {
  km::sampling_options so;
  so.n = w.samples;
  so.temperature = 1.0;
  so.top_p = 1.0;
  so.seed = seed;
  so.max_new_tokens = new_tokens;
  return so;
}

struct timed_generation {
  json report;  ///< seconds, tokens/s, peak memory
  double median_tokens_per_s = 0;
  std::vector<km::generation> last;  ///< the last rep's rows, for the checks
};

// R timed generate() calls on the whole batch (seeds 100 + r) after a short warm-up, as `label`:
// tokens/s of each and the allocator's peak memory over them.
kforge::result<timed_generation> time_generate(km::CausalLMImpl& model,
                                               const std::vector<std::vector<std::int64_t>>& prompts, const workload& w,
                                               const at::Device& dev, const std::string& label) {
  if (auto warm = km::generate(model, prompts, sampling(w, 7, w.warmup_tokens)); !warm)
    return kforge::error{"warm-up: " + warm.message()};
  const double tokens = static_cast<double>(w.prompts * w.samples * w.new_tokens);
  sync(dev);
  kforge::bench::reset_peak_memory(dev);
  timed_generation out;
  std::vector<double> seconds, rates;
  for (int r = 0; r < w.reps; ++r) {
    sync(dev);
    const auto t = clk::now();
    // Ends with a device-to-host copy: synchronous.
    auto g = km::generate(model, prompts, sampling(w, 100 + static_cast<std::uint64_t>(r), w.new_tokens));
    const double sec = std::chrono::duration<double>(clk::now() - t).count();
    if (!g) return g.err();
    seconds.push_back(sec);
    rates.push_back(tokens / sec);
    std::printf("%s: rep %d: %.2f s, %.0f tokens/s\n", label.c_str(), r, sec, tokens / sec);
    out.last = std::move(g).value();
  }
  const peak_memory peak = kforge::bench::read_peak_memory(dev);
  const spread rate = spread::of(rates);
  out.median_tokens_per_s = rate.median;
  out.report = {{"seconds", seconds}, {"tokens_per_s", rate.to_json()}, {"peak_allocated_bytes", peak.allocated},
                {"peak_reserved_bytes", peak.reserved}};
  std::printf("%s: %.0f tokens/s (%.0f..%.0f), peak allocated %.2f GiB, reserved %.2f GiB\n", label.c_str(),
              rate.median, rate.min, rate.max, gib(peak.allocated), gib(peak.reserved));
  return out;
}

// A random LoRA adapter of rank `rank` (alpha 2 rank) on every projection, put on `model` the way an
// engine sampler takes a published one: written as a PEFT directory, applied by replace_lora and
// switched on. B is drawn (normal, std 0.02) rather than zero, so the adapter changes the model.
kforge::status put_random_adapter(km::CausalLMImpl& model, std::int64_t rank, const std::string& dir) {
  km::lora_options lo;
  lo.rank = rank;
  lo.alpha = 2.0 * static_cast<double>(rank);
  lo.targets = km::lora_target_names();
  if (auto s = km::attach_lora(model, lo); !s) return s;
  km::draw_lora_b(model, 0.02, 1);
  if (auto s = km::save_lora(model, dir, ""); !s) return s;
  km::remove_lora(model);
  if (auto s = km::replace_lora(model, dir); !s) return s;
  *model.lora->enabled = true;
  return {};
}

// The engine sampling with a LoRA adapter: unmerged (the adapter's product added at every
// projection), then merged into the weights (merge_lora). The merged model must score the
// unmerged rows as they were sampled, within the rounding of the merged weights (check()).
json bench_adapter(km::CausalLMImpl& model, const std::vector<std::vector<std::int64_t>>& prompts, const workload& w,
                   const at::Device& dev, bool bf16, std::int64_t rank, const std::string& dir, bool& ok) {
  if (auto s = put_random_adapter(model, rank, dir); !s) {
    std::printf("lora: FAILED to put the adapter on: %s\n", s.message().c_str());
    ok = false;
    return {{"failed", s.message()}};
  }
  auto unmerged = time_generate(model, prompts, w, dev, "lora unmerged");
  if (!unmerged) {
    std::printf("lora unmerged: FAILED: %s\n", unmerged.message().c_str());
    ok = false;
    return {{"failed", unmerged.message()}};
  }
  km::merge_lora(model);
  auto merged = time_generate(model, prompts, w, dev, "lora merged");
  if (!merged) {
    std::printf("lora merged: FAILED: %s\n", merged.message().c_str());
    ok = false;
    return {{"failed", merged.message()}};
  }
  bool fine = true;
  std::printf("the merged model on the unmerged rows: ");
  json same = check(model, prompts, unmerged->last, w, bf16 ? merged_bf16 : same_fp32, fine);
  ok = ok && fine;
  const double ratio = merged->median_tokens_per_s / unmerged->median_tokens_per_s;
  std::printf("lora rank %lld: merged / unmerged tokens/s %.2fx\n", static_cast<long long>(rank), ratio);
  return {{"rank", rank}, {"alpha", 2 * rank}, {"targets", km::lora_target_names()}, {"unmerged", unmerged->report},
          {"merged", merged->report}, {"merged_over_unmerged", ratio}, {"merged_scores_unmerged_rows", same}};
}

// Episodes' turns beside a batch of new groups, as the engine sampler meets them: `turns` contexts of
// `context` random ids with one sample each. Apart: the groups' call, then the turns' call (the
// sampler with [sampler] batch_turns_with_groups = false); together: one call, prompt_n giving each
// prompt its count. R reps of each, alternating, after one warm-up of each; the joint call's rows are
// checked as the groups' are (the first group row and the last turn row scored).
json bench_turns(km::CausalLMImpl& model, const std::vector<std::vector<std::int64_t>>& groups, const workload& w,
                 std::int64_t turns, std::int64_t context, const at::Device& dev, bool bf16, bool& ok) {
  workload tw = w;
  tw.prompts = turns;
  tw.samples = 1;
  tw.prompt_len = context;
  const auto contexts = random_prompts(tw, model.config.vocab_size);
  std::vector<std::vector<std::int64_t>> all = groups;
  all.insert(all.end(), contexts.begin(), contexts.end());
  auto joint_options = [&](std::uint64_t seed, std::int64_t new_tokens) {
    km::sampling_options so = sampling(w, seed, new_tokens);
    so.prompt_n.assign(groups.size(), w.samples);
    so.prompt_n.resize(all.size(), 1);
    return so;
  };
  auto apart = [&](std::uint64_t seed, std::int64_t new_tokens) -> kforge::status {
    if (auto g = km::generate(model, groups, sampling(w, seed, new_tokens)); !g) return g.err();
    km::sampling_options so = sampling(w, seed + 1, new_tokens);
    so.n = 1;
    if (auto t = km::generate(model, contexts, so); !t) return t.err();
    return {};
  };
  if (auto s = apart(7, w.warmup_tokens); !s) return {{"failed", "warm-up apart: " + s.message()}};
  if (auto g = km::generate(model, all, joint_options(7, w.warmup_tokens)); !g)
    return {{"failed", "warm-up together: " + g.message()}};
  std::vector<double> apart_s, joint_s;
  std::vector<km::generation> last;
  for (int r = 0; r < w.reps; ++r) {
    const auto seed = 100 + static_cast<std::uint64_t>(r);
    sync(dev);
    auto t = clk::now();
    if (auto s = apart(seed, w.new_tokens); !s) return {{"failed", "apart: " + s.message()}};
    apart_s.push_back(std::chrono::duration<double>(clk::now() - t).count());
    sync(dev);
    t = clk::now();
    auto g = km::generate(model, all, joint_options(seed, w.new_tokens));
    if (!g) return {{"failed", "together: " + g.message()}};
    joint_s.push_back(std::chrono::duration<double>(clk::now() - t).count());
    std::printf("turns: rep %d: apart %.2f s, together %.2f s\n", r, apart_s.back(), joint_s.back());
    last = std::move(g).value();
  }
  bool fine = true;
  std::printf("the joint call's rows: ");
  json checked = check(model, all, last, w, bf16 ? same_bf16 : same_fp32, fine);
  ok = ok && fine;
  const spread a = spread::of(apart_s), j = spread::of(joint_s);
  std::printf("turns: %lld contexts of %lld ids beside %zu groups of %lld: apart %.2f s (%.2f..%.2f), together "
              "%.2f s (%.2f..%.2f): together / apart %.2fx\n",
              static_cast<long long>(turns), static_cast<long long>(context), groups.size(),
              static_cast<long long>(w.samples), a.median, a.min, a.max, j.median, j.min, j.max, j.median / a.median);
  return {{"turns", turns}, {"turn_context", context}, {"apart_seconds", a.to_json()},
          {"together_seconds", j.to_json()}, {"together_over_apart", j.median / a.median}, {"check", checked}};
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path;
  shape s;
  workload w;
  bool cpu_smoke = false, anchor = true, qwen_shape = false, cpu_bf16 = false, profile = false;
  std::string model_dir;
  std::int64_t layers = -1, prompts = -1, samples = -1, prompt_len = -1, new_tokens = -1, lora_rank = 0;
  std::int64_t turns = 0, turn_context = 4096;
  int reps = -1;
  std::string shape_list;
  for (const auto& [name, unused] : kforge::bench::named_shapes()) shape_list += (shape_list.empty() ? "" : "|") + name;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string("x"); };
    try {
      if (a == "--json") json_path = next();
      else if (a == "--reps") reps = std::stoi(next());
      else if (a == "--shape") s = kforge::bench::shape_named(next()).value();  // throws for an unknown name
      else if (a == "--lora-rank") lora_rank = std::stoll(next());
      else if (a == "--turns") turns = std::stoll(next());
      else if (a == "--turn-context") turn_context = std::stoll(next());
      else if (a == "--layers") layers = std::stoll(next());
      else if (a == "--batch") prompts = std::stoll(next());
      else if (a == "--samples") samples = std::stoll(next());
      else if (a == "--prompt-len") prompt_len = std::stoll(next());
      else if (a == "--new-tokens") new_tokens = std::stoll(next());
      else if (a == "--no-anchor") anchor = false;
      else if (a == "--model") model_dir = next();
      else if (a == "--profile") profile = true;
      else if (a == "--cpu-smoke") cpu_smoke = true;
      else if (a == "--qwen-shape") qwen_shape = true;
      else if (a == "--bf16") cpu_bf16 = true;
      else throw std::invalid_argument(a);
      if (lora_rank < 0 || turns < 0 || turn_context < 1) throw std::invalid_argument(a);
    } catch (const std::exception&) {
      std::fprintf(stderr,
                   "usage: %s [--json FILE] [--shape %s] [--reps R] [--layers L] [--batch P] [--samples N] "
                   "[--prompt-len T] [--new-tokens K] [--lora-rank R] [--turns T [--turn-context C]] [--no-anchor] "
                   "[--model DIR] [--profile] "
                   "[--cpu-smoke [--qwen-shape] [--bf16]]\n",
                   argv[0], shape_list.c_str());
      return 2;
    }
  }
  const bool gpu = torch::cuda::is_available() && torch::cuda::device_count() > 0;
  if (!gpu && !cpu_smoke) {
    std::printf("generate_bench: SKIP: no CUDA device visible to LibTorch (--cpu-smoke runs a tiny model on the CPU)\n");
    return 0;
  }
  if (cpu_smoke) {
    if (!qwen_shape) s = {64, 2, 4, 2, 128, 512, 1, 2, s.tied};
    w = {2, 2, 16, 8, 4, 2};
  }
  if (layers > 0) s.layers = layers;
  if (prompts > 0) w.prompts = prompts;
  if (samples > 0) w.samples = samples;
  if (prompt_len > 0) w.prompt_len = prompt_len;
  if (new_tokens > 0) w.new_tokens = new_tokens;
  if (reps > 0) w.reps = reps;
  w.warmup_tokens = std::min(w.warmup_tokens, w.new_tokens);
  const at::Device dev = cpu_smoke ? at::Device(at::kCPU) : at::Device(at::kCUDA, 0);
  const bool bf16 = !cpu_smoke || cpu_bf16;
  const std::int64_t rows = w.prompts * w.samples;

  const bool own_model = model_dir.empty();
  const fs::path dir =
      own_model ? fs::temp_directory_path() / ("kforge-generate-bench-" + std::to_string(::getpid())) : fs::path(model_dir);
  if (own_model) {
    fs::remove_all(dir);
    fs::create_directories(dir);
  } else {
    auto c = km::load_model_config(model_dir);
    if (!c) {
      std::fprintf(stderr, "generate_bench: --model %s: %s\n", model_dir.c_str(), c.message().c_str());
      return 2;
    }
    s.hidden = c->hidden_size, s.layers = c->num_hidden_layers, s.heads = c->num_attention_heads;
    s.kv_heads = c->num_key_value_heads, s.intermediate = c->intermediate_size, s.vocab = c->vocab_size;
  }
  json out;
  out["device"] = dev.str();
  out["dtype"] = bf16 ? "bfloat16" : "float32";
  out["model"] = own_model ? config_json(s) : json{{"dir", model_dir}, {"config", json::parse(std::ifstream(dir / "config.json"))}};
  out["workload"] = {{"prompts", w.prompts}, {"samples", w.samples}, {"rows", rows}, {"prompt_len", w.prompt_len},
                     {"new_tokens", w.new_tokens}, {"warmup_new_tokens", w.warmup_tokens}, {"reps", w.reps},
                     {"temperature", 1.0}, {"top_p", 1.0}};
  std::printf("generate_bench: %s %s, %lld layers x hidden %lld, vocab %lld; %lld prompts x %lld samples x %lld new "
              "tokens (prompt %lld), %d reps after a %lld-token warm-up\n",
              dev.str().c_str(), bf16 ? "bf16" : "fp32", static_cast<long long>(s.layers),
              static_cast<long long>(s.hidden), static_cast<long long>(s.vocab), static_cast<long long>(w.prompts),
              static_cast<long long>(w.samples), static_cast<long long>(w.new_tokens),
              static_cast<long long>(w.prompt_len), w.reps, static_cast<long long>(w.warmup_tokens));

  auto t0 = clk::now();
  if (own_model) {
    if (auto st = write_random_checkpoint(s, dir.string(), dev); !st) {
      std::fprintf(stderr, "generate_bench: %s\n", st.message().c_str());
      return 1;
    }
  }
  std::printf("checkpoint: %s (%.1f s)\n", dir.c_str(), std::chrono::duration<double>(clk::now() - t0).count());

  bool ok = true;
  double ours_median = 0;
  {
    km::load_options lo;
    lo.device = dev;
    lo.dtype = bf16 ? at::kBFloat16 : at::kFloat;
    auto model = km::load_causal_lm(dir.string(), lo);
    if (!model) {
      std::fprintf(stderr, "generate_bench: %s\n", model.message().c_str());
      return 1;
    }
    const auto prompts_ids = random_prompts(w, s.vocab);
    auto base = time_generate(**model, prompts_ids, w, dev, "ours");
    if (!base) {
      std::fprintf(stderr, "generate_bench: %s\n", base.message().c_str());
      return 1;
    }
    ours_median = base->median_tokens_per_s;
    out["ours"] = base->report;
    out["check"] = check(**model, prompts_ids, base->last, w, bf16 ? same_bf16 : same_fp32, ok);
    if (profile) {
      // Prefill included: its ops are few next to K decoding steps' worth.
      sync(dev);
      kforge::model::op_profile prof;
      auto g = km::generate(**model, prompts_ids, sampling(w, 100, w.new_tokens));
      prof.stop();
      json p = prof.report(25);
      p["new_tokens"] = w.new_tokens;
      p["wall_ms_per_step"] = p["wall_us"].get<double>() / 1e3 / static_cast<double>(w.new_tokens);
      std::printf("op profile: %.2f ms host wall per decoding step (%s)\n", p["wall_ms_per_step"].get<double>(),
                  g ? "generate ok" : g.message().c_str());
      out["profile"] = p;
    }
    if (turns > 0) out["turns"] = bench_turns(**model, prompts_ids, w, turns, turn_context, dev, bf16, ok);
    if (lora_rank > 0)  // last: it merges the adapter into the model
      out["lora"] = bench_adapter(**model, prompts_ids, w, dev, bf16, lora_rank, (dir / "adapter").string(), ok);
  }
  kforge::model::release_torch_cache();  // the anchor's process needs the memory

  if (anchor) {
    const std::vector<std::string> cmd = {
        "python3", std::string(KFORGE_SOURCE_DIR) + "/bench/hf_generate.py", "--model", dir.string(),
        "--batch", std::to_string(w.prompts), "--samples", std::to_string(w.samples),
        "--prompt-len", std::to_string(w.prompt_len), "--new-tokens", std::to_string(w.new_tokens),
        "--warmup-tokens", std::to_string(w.warmup_tokens), "--reps", std::to_string(w.reps),
        "--device", dev.is_cuda() ? "cuda:0" : "cpu", "--dtype", bf16 ? "bfloat16" : "float32"};
    auto py = kforge::run_process(cmd, std::chrono::minutes(20));
    const std::string text = py ? py->output : py.message();
    const auto at = text.rfind("HF_GENERATE ");
    if (py && py->exit_code == 0 && at != std::string::npos) {
      const json hf = json::parse(text.substr(at + 12, text.find('\n', at) - at - 12));
      const spread rate = spread::of(hf.at("tokens_per_s").get<std::vector<double>>());
      for (std::size_t r = 0; r < hf.at("seconds").size(); ++r)
        std::printf("hf: rep %zu: %.2f s, %.0f tokens/s\n", r, hf["seconds"][r].get<double>(),
                    hf["tokens_per_s"][r].get<double>());
      const double ratio = ours_median / rate.median;
      out["anchor"] = hf;
      out["anchor"]["tokens_per_s_spread"] = rate.to_json();
      out["ratio_ours_over_hf"] = ratio;
      out["goal_2x_met"] = ratio >= 2.0;
      std::printf("hf (transformers %s, torch %s, %s): %.0f tokens/s (%.0f..%.0f), peak allocated %.2f GiB\n",
                  hf.value("transformers", "?").c_str(), hf.value("torch", "?").c_str(),
                  hf.value("attn_implementation", "?").c_str(), rate.median, rate.min, rate.max,
                  hf.value("peak_allocated_bytes", 0.0) / (1 << 30));
      std::printf("ratio ours/hf: %.2fx (goal >= 2x: %s)\n", ratio, ratio >= 2.0 ? "met" : "NOT met");
    } else if (const auto missing = text.find("No module named"); missing != std::string::npos || !py) {
      const std::string why = missing != std::string::npos ? text.substr(missing, text.find('\n', missing) - missing)
                                                           : text;
      std::printf("anchor: SKIP: python3 with torch and transformers is not available here (%s)\n", why.c_str());
      out["anchor"] = {{"skipped", text.substr(0, 500)}};
    } else {
      std::printf("anchor: FAILED:\n%s\n", text.substr(text.size() > 3000 ? text.size() - 3000 : 0).c_str());
      out["anchor"] = {{"failed", text.substr(text.size() > 3000 ? text.size() - 3000 : 0)}};
    }
  } else {
    out["anchor"] = {{"skipped", "--no-anchor"}};
  }

  if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
  if (own_model) fs::remove_all(dir);
  return ok ? 0 : 1;
}

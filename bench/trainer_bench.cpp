// trainer_bench: GRPO step throughput and peak memory of the trainer, one GPU and data parallel.
//
//   trainer_bench [--json FILE] [--shape NAME] [--layers L] [--steps R] [--groups G] [--samples N]
//                 [--prompt-len P] [--completion-len C] [--micro-batch M] [--lora-rank R]
//                 [--checkpointing] [--gpus K] [--fp32] [--peak-tflops F] [--cpu-smoke]
//
// Model: random weights in a real model's shapes (bench/random_model.hpp: --shape qwen2.5-0.5b,
// the default, or qwen2.5-coder-7b; --layers shrinks it), written as a bf16 checkpoint (drawn on
// the GPU, so a 7B one costs the 15 GB write, not minutes of CPU draws) and loaded by
// trainer::data_parallel_trainer, the trainer stage's own path (load_causal_lm builds the modules
// on the CPU in fp32 first: for 7B, ~30 GB of host memory and about a minute), with the
// policy_trainer_options a manifest's [trainer] table gives:
//   - full fine-tuning (default): fp32 master weights on every rank, forward and backward in bf16
//     (--fp32 computes in fp32), a frozen bf16 copy as the KL reference;
//   - --lora-rank R: trainer.lora = { rank = R, alpha = 2R (the manifest's default ratio, 32 / 16),
//     targets = all seven projections q, k, v, o, gate, up, down }: the base loaded straight into
//     bf16 and frozen, fp32 adapters and AdamW state, the reference the base with the adapters off;
//   - --checkpointing: trainer.activation_checkpointing (each decoder layer recomputed in backward).
// Workload: one TrainBatch of G = 8 groups x N = 8 samples, P = 256 random prompt tokens and
// C = 256 random completion tokens each, rewards that differ within every group (every group
// carries signal), on-policy; micro-batches of M = 8 rows. 4 sequences of 4096 tokens a
// micro-batch: --prompt-len 1024 --completion-len 3072 --micro-batch 4.
//
// Runs, each through trainer::data_parallel_trainer: 1 rank on GPU 0, then (full fine-tuning
// only) K ranks on GPUs 0..K-1 (K = every visible GPU, at most --gpus) on the same global batch.
// Each run: 1 warm-up step, then R = 5 timed steps; median (min..max). Reported per run:
//   - tokens/s: (P + C) x rows / step time (every position goes forward and backward);
//   - parameters: total (base + adapters), trainable (adapters with LoRA, else all), and N, those
//     that multiply every token (all but an untied input embedding, which is a lookup);
//   - model FLOPs utilisation (MFU): (6 (N + A) + 2 N) x tokens per step / step time / K / the
//     GPU's dense peak for the compute dtype (--peak-tflops; default the H200's and H100 SXM's: 989
//     for bf16, 67 for fp32, since LibTorch does not use TF32 for fp32 matmuls by default). 6 per
//     trained parameter and token is the usual convention for forward + backward — counted so with
//     LoRA too (A = the adapters' parameters, 0 without), although there the frozen base's weight
//     gradients are never computed — and 2 N is the reference's forward; recomputation is not
//     counted;
//   - hardware FLOPs utilisation (HFU): the same for the FLOPs the GPU executes: the forward
//     2 (N + A), twice with --checkpointing; the backward 4 N (full fine-tuning) or 2 N + 4 A
//     (LoRA: the base's input gradients only); the reference's forward 2 N. With LoRA and
//     checkpointing this is 8 N + 8 A, about the MFU's count;
//   - both leave attention's quadratic part out (at 4096 tokens about 5 % of a 7B model's);
//   - peak GPU memory: the CUDA caching allocator's high-water marks of allocated and reserved
//     bytes over the timed steps (reset after the warm-up, whose cached blocks stay reserved), and
//     what was allocated when they were reset (weights, adapters, optimiser state: what stays
//     between steps). With LoRA the reference's log-probs are computed inside the step, so the
//     peak includes them;
//   - scaling efficiency of K ranks: (t_1 / t_K) / K (goal >= 85 %).
// All-reduce: the gradient all-reduce the trainer runs (all_reduce_gradients: buckets, one NCCL
// call each, copies back) on tensors of the model's parameter shapes, against NCCL's own
// all-reduce of one buffer of the same total size (trainer/nccl_check.hpp, nccl-tests' algorithm)
// in the same run: time and bus bandwidth (bytes x 2(K-1)/K / time) of each.
// The K-rank run sums the gradients after the backward pass (what in-process ranks do); it runs
// once more with each bucket summed during the backward pass (what ranks in processes do), for
// the step time of each.
// Checked while measuring: every step stepped with a finite loss and gradient norm. Full
// fine-tuning: after the K-rank run every rank's weights equal rank 0's bit for bit, and rank 0's
// update (weights minus the starting ones) points where the 1-rank run's does (cosine > 0.9; bf16
// rounding and AdamW make single weights differ). LoRA: the base stayed frozen (no gradient, its
// bits unchanged, in the compute dtype) and every adapter tensor moved. A failed check exits 1.
//
// Without a GPU it prints SKIP and exits 0, unless --cpu-smoke: a tiny model (hidden 64, 2 layers;
// the output head tied or not as --shape's) in fp32 runs the same path on the CPU, so the bench is
// checked anywhere: full fine-tuning on 1 rank and 2 CPU ranks (a thread group), then the same 2
// ranks joined by a socket group, as trainer.ranks = "processes" joins CPU ranks: step time against
// the thread ranks' and weights that must equal theirs bit for bit; with --lora-rank, 1 rank.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <nlohmann/json.hpp>
#include <torch/cuda.h>

#include "bench/random_model.hpp"
#include "model/lora.hpp"
#include "model/weight_diff.hpp"
#include "model/weights.hpp"
#include "trainer/collective.hpp"
#include "trainer/data_parallel_trainer.hpp"
#include "trainer/socket_group.hpp"
#if defined(KFORGE_WITH_CUDA)
#include "trainer/nccl_check.hpp"
#include "trainer/nccl_group.hpp"
#endif

namespace fs = std::filesystem;
namespace km = kforge::model;
namespace kt = kforge::trainer;
using json = nlohmann::json;
using clk = std::chrono::steady_clock;
using kforge::bench::spread;

namespace {

struct workload {
  std::int64_t groups = 8, samples = 8, prompt_len = 256, completion_len = 256, micro_batch = 8;
  int steps = 5;
};

kt::train_batch make_batch(const workload& w, std::int64_t vocab, std::uint64_t version) {
  at::Generator gen = at::detail::createCPUGenerator(5);
  const auto ids = [&](std::int64_t n) {
    const at::Tensor t = at::randint(vocab, {n}, gen, at::TensorOptions().dtype(at::kLong));
    return std::vector<std::int64_t>(t.data_ptr<std::int64_t>(), t.data_ptr<std::int64_t>() + n);
  };
  kt::train_batch b;
  for (std::int64_t g = 0; g < w.groups; ++g) {
    kt::sample_group group;
    group.group_id = static_cast<std::uint64_t>(g);
    const auto prompt = ids(w.prompt_len);
    for (std::int64_t i = 0; i < w.samples; ++i) {
      kt::train_sample s;
      s.prompt_tokens = prompt;
      s.completion_tokens = ids(w.completion_len);
      s.reward = static_cast<double>(i) / static_cast<double>(w.samples);
      s.policy_version = version;
      group.samples.push_back(std::move(s));
    }
    b.groups.push_back(std::move(group));
  }
  return b;
}

void sync_all(const std::vector<at::Device>& devices) {
  for (const auto& d : devices)
    if (d.is_cuda()) torch::cuda::synchronize(d.index());
}

// What the trainer is asked to train, as a manifest's [trainer] table would ask it.
struct setup {
  bool bf16 = true;
  std::int64_t lora_rank = 0;  ///< 0: full fine-tuning
  bool checkpointing = false;
};

kt::policy_trainer_options trainer_options(const workload& w, const setup& su) {
  kt::policy_trainer_options o;
  o.step.lr = 1e-5;
  o.step.micro_batch_size = w.micro_batch;
  o.kl.initial_coef = 0.04;
  o.bf16_compute = su.bf16;
  o.activation_checkpointing = su.checkpointing;
  if (su.lora_rank > 0) {
    km::lora_options lo;
    lo.rank = su.lora_rank;
    lo.alpha = 2.0 * static_cast<double>(su.lora_rank);
    lo.targets = km::lora_target_names();
    o.lora = lo;
  }
  return o;
}

struct run_result {
  std::vector<double> seconds;
  std::int64_t buckets_in_backward = 0;  ///< rank 0's gradient buckets summed during backward, last step
  double last_kl = 0;                    ///< the last step's mean KL to the reference
  std::int64_t resident_bytes = 0;       ///< allocated on rank 0's GPU after the warm-up
  kforge::bench::peak_memory peak;       ///< rank 0's GPU over the timed steps
  bool ok = true;
  std::unique_ptr<kt::data_parallel_trainer> trainer;
};

std::unique_ptr<kt::data_parallel_trainer> create(const std::string& model_dir, const std::vector<at::Device>& devices,
                                                  const kt::policy_trainer_options& po, bool overlap) {
  kt::data_parallel_options o;
  o.model_dir = model_dir;
  o.devices = devices;
  o.trainer = po;
  o.trainer.step.overlap_grad_reduce = overlap;
  o.in_process_background_sums = overlap;  // this bench's ranks are threads: see nccl_group_options
  auto t = kt::data_parallel_trainer::create(o);
  if (!t) {
    std::printf("  FAILED to build %zu rank(s): %s\n", devices.size(), t.message().c_str());
    return nullptr;
  }
  return std::move(*t);
}

// One warm-up step and w.steps timed ones of `t`; the peak memory of rank 0's device over the
// timed ones.
run_result time_steps(std::unique_ptr<kt::data_parallel_trainer> t, const std::vector<at::Device>& devices,
                      const workload& w, std::int64_t vocab) {
  run_result out;
  kforge::model::release_torch_cache();  // what loading and checks left cached is not the steps' to count
  for (int s = 0; s <= w.steps; ++s) {  // step 0 warms up
    const auto batch = make_batch(w, vocab, t->lead().policy_version());
    sync_all(devices);
    if (s == 1) {
      out.resident_bytes = kforge::bench::allocated_memory(devices.front());
      kforge::bench::reset_peak_memory(devices.front());
    }
    const auto t0 = clk::now();
    auto st = t->step(batch);
    sync_all(devices);
    const double sec = std::chrono::duration<double>(clk::now() - t0).count();
    if (!st || !st->grpo.stepped || !std::isfinite(st->grpo.loss.loss) || !std::isfinite(st->grpo.grad_norm)) {
      std::printf("  FAILED step %d: %s\n", s, st ? "did not step, or a non-finite loss / gradient norm" : st.message().c_str());
      out.ok = false;
      return out;
    }
    if (s > 0) out.seconds.push_back(sec);
    out.buckets_in_backward = st->grpo.buckets_reduced_in_backward;
    out.last_kl = st->grpo.loss.mean_kl;
    std::printf("  step %d: %.3f s, loss %.4f, grad norm %.3f, KL %.3g%s\n", s, sec, st->grpo.loss.loss,
                st->grpo.grad_norm, st->grpo.loss.mean_kl, s == 0 ? " (warm-up)" : "");
  }
  out.peak = kforge::bench::read_peak_memory(devices.front());
  out.trainer = std::move(t);
  return out;
}

run_result run(const std::string& model_dir, const std::vector<at::Device>& devices, const workload& w,
               std::int64_t vocab, const kt::policy_trainer_options& po, bool overlap = false) {
  auto t = create(model_dir, devices, po, overlap);
  if (!t) {
    run_result failed;
    failed.ok = false;
    return failed;
  }
  return time_steps(std::move(t), devices, w, vocab);
}

// The parameter counts the FLOPs are reckoned from (see the top of this file).
struct param_counts {
  double base = 0;      ///< the model's own parameters
  double adapters = 0;  ///< LoRA's A and B (0 without)
  double matmul = 0;    ///< N: the base's parameters that multiply every token
};

param_counts count_parameters(km::CausalLM& lm) {
  param_counts c;
  for (const auto& p : lm->parameters()) c.base += static_cast<double>(p.numel());
  for (const auto& p : km::lora_parameters(*lm)) c.adapters += static_cast<double>(p.numel());
  c.matmul = c.base;
  if (!lm->config.tie_word_embeddings) c.matmul -= static_cast<double>(lm->model->embed_tokens->weight.numel());
  return c;
}

struct flops_per_token {
  double model = 0;     ///< MFU's count
  double executed = 0;  ///< HFU's count
};

flops_per_token flops_of(const param_counts& p, bool lora, bool checkpointing) {
  const double n = p.matmul, a = p.adapters;
  const double forward = 2 * (n + a), reference = 2 * n;
  const double backward = lora ? 2 * n + 4 * a : 4 * n;
  return {6 * (n + a) + reference, forward * (checkpointing ? 2 : 1) + backward + reference};
}

// Each tensor's bits summed as integers: equal before and after a step exactly where the step
// left the tensor alone (no AdamW update keeps a whole tensor's sum of bit patterns).
std::vector<std::int64_t> bit_sums(const std::vector<at::Tensor>& tensors) {
  std::vector<std::int64_t> out;
  for (const auto& t : tensors) {
    const auto as = t.element_size() == 2 ? at::kShort : t.element_size() == 4 ? at::kInt : at::kLong;
    out.push_back(t.detach().contiguous().view(as).sum(at::kLong).item<std::int64_t>());
  }
  return out;
}

// How many entries of `after` equal `before`'s at the same place.
std::int64_t count_same(const std::vector<std::int64_t>& before, const std::vector<std::int64_t>& after) {
  std::int64_t n = 0;
  for (std::size_t i = 0; i < std::min(before.size(), after.size()); ++i) n += before[i] == after[i];
  return n;
}

// LoRA's invariants after training: the base frozen (no gradient, its bits those of `base_before`,
// in the compute dtype) and every adapter tensor moved from `adapters_before` (B from zero at the
// first step, A once B is no longer zero).
json check_lora(km::CausalLM& lm, const std::vector<std::int64_t>& base_before,
                const std::vector<std::int64_t>& adapters_before, at::ScalarType compute, bool& ok) {
  const auto base = lm->parameters();
  std::int64_t trainable_base = 0, wrong_dtype = 0;
  for (const auto& p : base) {
    trainable_base += p.requires_grad() || p.grad().defined();
    wrong_dtype += p.scalar_type() != compute;
  }
  const auto base_after = bit_sums(base), adapters_after = bit_sums(km::lora_parameters(*lm));
  const auto base_changed = static_cast<std::int64_t>(base_after.size()) - count_same(base_before, base_after);
  const std::int64_t adapters_unchanged = count_same(adapters_before, adapters_after);
  const bool fine = trainable_base == 0 && wrong_dtype == 0 && base_changed == 0 && adapters_unchanged == 0 &&
                    !adapters_after.empty();
  ok = ok && fine;
  std::printf("  LoRA check: base tensors trainable %lld, not %s %lld, changed %lld of %zu; adapter tensors "
              "unchanged %lld of %zu: %s\n",
              static_cast<long long>(trainable_base), c10::toString(compute), static_cast<long long>(wrong_dtype),
              static_cast<long long>(base_changed), base_after.size(), static_cast<long long>(adapters_unchanged),
              adapters_after.size(), fine ? "ok" : "FAILED");
  return {{"base_tensors", base_after.size()}, {"base_trainable", trainable_base}, {"base_wrong_dtype", wrong_dtype},
          {"base_changed", base_changed}, {"adapter_tensors", adapters_after.size()},
          {"adapters_unchanged", adapters_unchanged}, {"ok", fine}};
}

// `k` CPU ranks as a trainer with trainer.ranks = "processes" runs them, joined by a socket group
// (trainer/socket_group.hpp) — here each on a thread of its own with its own socket, the same
// messages as between processes — stepping the same batches as run(); rank 0's trainer and its
// step times (all ranks step in lockstep).
run_result run_socket_ranks(const std::string& model_dir, int k, const workload& w, std::int64_t vocab,
                            const kt::policy_trainer_options& po) {
  run_result out;
  const std::string endpoint = "ipc:///tmp/kforge-trainer-bench-" + std::to_string(::getpid()) + ".sock";
  std::vector<std::unique_ptr<kt::data_parallel_trainer>> ranks(static_cast<std::size_t>(k));
  std::vector<std::string> errors(static_cast<std::size_t>(k));
  auto on_ranks = [&](const std::function<void(int)>& f) {
    std::vector<std::thread> ts;
    for (int r = 0; r < k; ++r) ts.emplace_back(f, r);
    for (auto& t : ts) t.join();
    for (const auto& e : errors)
      if (!e.empty()) {
        std::printf("  FAILED: %s\n", e.c_str());
        out.ok = false;
      }
  };
  on_ranks([&](int r) {
    auto g = kt::make_socket_group(endpoint, r, k, std::chrono::minutes(5));
    if (!g) return void(errors[static_cast<std::size_t>(r)] = g.message());
    kt::data_parallel_options o;
    o.model_dir = model_dir;
    o.devices = {at::kCPU};
    o.trainer = po;
    o.group = *g;
    auto t = kt::data_parallel_trainer::create(o);
    if (!t) return void(errors[static_cast<std::size_t>(r)] = t.message());
    ranks[static_cast<std::size_t>(r)] = std::move(*t);
  });
  for (int s = 0; out.ok && s <= w.steps; ++s) {
    const auto batch = make_batch(w, vocab, ranks[0]->lead().policy_version());
    const auto t0 = clk::now();
    on_ranks([&](int r) {
      auto st = ranks[static_cast<std::size_t>(r)]->step(batch);
      if (!st) errors[static_cast<std::size_t>(r)] = st.message();
    });
    const double sec = std::chrono::duration<double>(clk::now() - t0).count();
    if (s > 0) out.seconds.push_back(sec);
    std::printf("  step %d: %.3f s%s\n", s, sec, s == 0 ? " (warm-up)" : "");
  }
  bool same = out.ok;
  for (int r = 1; same && r < k; ++r)
    same = kforge::model::max_weight_difference(*ranks[static_cast<std::size_t>(r)]->lead().policy(), *ranks[0]->lead().policy()) == 0;
  if (!same) {
    std::printf("  FAILED: the socket ranks' weights differ\n");
    out.ok = false;
  }
  out.trainer = std::move(ranks[0]);
  return out;
}

#if defined(KFORGE_WITH_CUDA)
// The trainer's gradient all-reduce (buckets, one NCCL call each, copies back) over tensors of the
// parameters' shapes on each of `gpus`, `iters` times after a warm-up; seconds per call (median).
double time_gradient_allreduce(const std::vector<at::Tensor>& like, const std::vector<int>& gpus, int iters,
                               std::string& error_out) {
  auto id = kt::new_nccl_id();
  if (!id) {
    error_out = id.message();
    return 0;
  }
  const int k = static_cast<int>(gpus.size());
  std::vector<std::vector<double>> times(static_cast<std::size_t>(k));
  std::vector<std::string> errors(static_cast<std::size_t>(k));
  std::vector<std::thread> threads;
  for (int r = 0; r < k; ++r)
    threads.emplace_back([&, r] {
      const auto i = static_cast<std::size_t>(r);
      auto g = kt::make_nccl_group(*id, r, k, gpus[i]);
      if (!g) {
        errors[i] = g.message();
        return;
      }
      std::vector<at::Tensor> params;
      for (const auto& p : like) {
        at::Tensor t = at::zeros(p.sizes(), at::TensorOptions().dtype(at::kFloat).device(at::kCUDA, gpus[i]));
        t.mutable_grad() = at::ones_like(t);
        params.push_back(t);
      }
      for (int it = -1; it < iters; ++it) {
        torch::cuda::synchronize(gpus[i]);
        const auto t0 = clk::now();
        if (auto s = kt::all_reduce_gradients(params, **g); !s) {
          errors[i] = s.message();
          return;
        }
        torch::cuda::synchronize(gpus[i]);
        if (it >= 0) times[i].push_back(std::chrono::duration<double>(clk::now() - t0).count());
      }
    });
  for (auto& t : threads) t.join();
  for (const auto& e : errors)
    if (!e.empty()) error_out = e;
  return error_out.empty() ? spread::of(times[0]).median : 0;
}
#endif

// The 1-rank run: the trainer built (the load timed) and stepped; with LoRA, its invariants checked
// after the steps against the bits before them.
struct one_rank {
  run_result run;
  param_counts params;
  double load_s = 0;
  json lora_check;
  bool lora_ok = true;
};

one_rank run_one_rank(const std::string& model_dir, const at::Device& dev, const workload& w, std::int64_t vocab,
                      const kt::policy_trainer_options& po) {
  one_rank out;
  const auto t0 = clk::now();
  auto t = create(model_dir, {dev}, po, /*overlap=*/false);
  out.load_s = std::chrono::duration<double>(clk::now() - t0).count();
  if (!t) {
    out.run.ok = false;
    return out;
  }
  auto& policy = t->lead().policy();
  out.params = count_parameters(policy);
  std::printf("  loaded in %.1f s: %.4g parameters, %.4g trainable, N = %.4g multiplying each token\n", out.load_s,
              out.params.base + out.params.adapters, po.lora ? out.params.adapters : out.params.base,
              out.params.matmul);
  std::vector<std::int64_t> base_before, adapters_before;
  if (po.lora) {
    base_before = bit_sums(policy->parameters());
    adapters_before = bit_sums(km::lora_parameters(*policy));
  }
  out.run = time_steps(std::move(t), {dev}, w, vocab);
  if (out.run.ok && po.lora)
    out.lora_check = check_lora(out.run.trainer->lead().policy(), base_before, adapters_before,
                                po.bf16_compute ? at::kBFloat16 : at::kFloat, out.lora_ok);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path;
  workload w;
  kforge::bench::shape s;
  setup su;
  bool cpu_smoke = false, fp32 = false;
  int max_gpus = 8;
  double peak_tflops = 0;
  std::int64_t layers = -1;
  std::string shape_list;
  for (const auto& [name, unused] : kforge::bench::named_shapes()) shape_list += (shape_list.empty() ? "" : "|") + name;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string("x"); };
    try {
      if (a == "--json") json_path = next();
      else if (a == "--shape") s = kforge::bench::shape_named(next()).value();  // throws for an unknown name
      else if (a == "--steps") w.steps = std::stoi(next());
      else if (a == "--groups") w.groups = std::stoll(next());
      else if (a == "--samples") w.samples = std::stoll(next());
      else if (a == "--prompt-len") w.prompt_len = std::stoll(next());
      else if (a == "--completion-len") w.completion_len = std::stoll(next());
      else if (a == "--micro-batch") w.micro_batch = std::stoll(next());
      else if (a == "--lora-rank") su.lora_rank = std::stoll(next());
      else if (a == "--checkpointing") su.checkpointing = true;
      else if (a == "--layers") layers = std::stoll(next());
      else if (a == "--gpus") max_gpus = std::stoi(next());
      else if (a == "--peak-tflops") peak_tflops = std::stod(next());
      else if (a == "--cpu-smoke") cpu_smoke = true;
      else if (a == "--fp32") fp32 = true;
      else throw std::invalid_argument(a);
      if (w.steps < 1 || w.groups < 1 || w.samples < 2 || w.prompt_len < 1 || w.completion_len < 1 ||
          w.micro_batch < 1 || su.lora_rank < 0 || max_gpus < 1 || peak_tflops < 0)
        throw std::invalid_argument(a);
    } catch (const std::exception&) {
      std::fprintf(stderr,
                   "usage: %s [--json FILE] [--shape %s] [--layers L] [--steps R>=1] [--groups G>=1] [--samples N>=2] "
                   "[--prompt-len P] [--completion-len C] [--micro-batch M] [--lora-rank R] [--checkpointing] "
                   "[--gpus K] [--fp32] [--peak-tflops F] [--cpu-smoke]\n",
                   argv[0], shape_list.c_str());
      return 2;
    }
  }
  const int visible = torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
  if (visible == 0 && !cpu_smoke) {
    std::printf("trainer_bench: SKIP: no CUDA device visible to LibTorch (--cpu-smoke runs a tiny model on the CPU)\n");
    return 0;
  }
  if (cpu_smoke) {
    s = {64, 2, 4, 2, 128, 512, 1, 2, s.tied};
    w = {2, 4, 16, 16, 4, std::min(w.steps, 2)};
  }
  if (layers > 0) s.layers = layers;
  const bool lora = su.lora_rank > 0;
  su.bf16 = !fp32 && !cpu_smoke;  // the CPU smoke computes in fp32, as the stage does there
  if (peak_tflops == 0) peak_tflops = su.bf16 ? 989.0 : 67.0;
  const auto po = trainer_options(w, su);
  const std::vector<at::Device> one = {cpu_smoke ? at::Device(at::kCPU) : at::Device(at::kCUDA, 0)};
  std::vector<at::Device> many;
  if (cpu_smoke) many = {at::Device(at::kCPU), at::Device(at::kCPU)};
  for (int g = 0; !cpu_smoke && g < std::min(visible, max_gpus); ++g)
    many.push_back(at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(g)));

  const double rows = static_cast<double>(w.groups * w.samples);
  const double tokens = rows * static_cast<double>(w.prompt_len + w.completion_len);
  const std::string training =
      lora ? "LoRA rank " + std::to_string(su.lora_rank) + " (alpha " + std::to_string(2 * su.lora_rank) +
                 ") on q, k, v, o, gate, up, down over a frozen " + (su.bf16 ? "bf16" : "fp32") + " base"
           : std::string(su.bf16 ? "bf16" : "fp32") + " compute on fp32 master weights";
  std::printf("trainer_bench: %s, %lld layers x hidden %lld (%s output head), %s%s; %lld groups x %lld samples x "
              "(%lld prompt + %lld completion) tokens, micro-batch %lld, %d timed steps\n",
              cpu_smoke ? "CPU smoke" : "GPU", static_cast<long long>(s.layers), static_cast<long long>(s.hidden),
              s.tied ? "tied" : "untied", training.c_str(), su.checkpointing ? ", activation checkpointing" : "",
              static_cast<long long>(w.groups), static_cast<long long>(w.samples), static_cast<long long>(w.prompt_len),
              static_cast<long long>(w.completion_len), static_cast<long long>(w.micro_batch), w.steps);

  const fs::path dir = fs::temp_directory_path() / ("kforge-trainer-bench-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto t0 = clk::now();
  if (auto st = kforge::bench::write_random_checkpoint(s, dir.string(), one.front()); !st) {
    std::fprintf(stderr, "trainer_bench: %s\n", st.message().c_str());
    return 1;
  }
  kforge::model::release_torch_cache();
  const double write_s = std::chrono::duration<double>(clk::now() - t0).count();
  std::printf("random bf16 checkpoint written in %.1f s\n", write_s);

  json out;
  out["model"] = kforge::bench::config_json(s);
  out["workload"] = {{"groups", w.groups}, {"samples", w.samples}, {"prompt_len", w.prompt_len},
                     {"completion_len", w.completion_len}, {"micro_batch", w.micro_batch}, {"steps", w.steps},
                     {"tokens_per_step", tokens}};
  out["peak_tflops"] = peak_tflops;
  out["compute"] = su.bf16 ? "bf16" : "fp32";
  out["lora"] = lora ? json{{"rank", po.lora->rank}, {"alpha", po.lora->alpha}, {"targets", po.lora->targets}} : json();
  out["activation_checkpointing"] = su.checkpointing;
  out["checkpoint_write_s"] = write_s;
  bool ok = true;

  std::printf("1 rank on %s:\n", one.front().str().c_str());
  one_rank solo = run_one_rank(dir.string(), one.front(), w, s.vocab, po);
  run_result& single = solo.run;
  const param_counts& params = solo.params;
  ok = ok && single.ok && solo.lora_ok;
  out["load_s"] = solo.load_s;
  const flops_per_token flops = flops_of(params, lora, su.checkpointing);
  out["parameters"] = params.base + params.adapters;
  out["trainable_parameters"] = lora ? params.adapters : params.base;
  out["matmul_parameters"] = params.matmul;
  out["flops_per_token"] = {{"model", flops.model}, {"executed", flops.executed}};
  const auto report = [&](const run_result& r, std::size_t ranks) {
    const spread t = spread::of(r.seconds);
    const double per_gpu = t.median * static_cast<double>(ranks) * peak_tflops * 1e12;
    const double mfu = flops.model * tokens / per_gpu, hfu = flops.executed * tokens / per_gpu;
    std::printf("  %zu rank(s): %.3f s/step (%.3f..%.3f), %.0f tokens/s, MFU %.1f %% (HFU %.1f %%) of %.0f TFLOP/s per "
                "GPU\n",
                ranks, t.median, t.min, t.max, tokens / t.median, 100 * mfu, 100 * hfu, peak_tflops);
    return json{{"ranks", ranks}, {"seconds", r.seconds}, {"step_s", t.to_json()}, {"tokens_per_s", tokens / t.median},
                {"mfu", mfu}, {"hfu", hfu}, {"last_mean_kl", r.last_kl}};
  };
  if (single.ok) {
    out["one_rank"] = report(single, 1);
    if (one.front().is_cuda()) {
      std::printf("  GPU memory: peak allocated %.2f GiB, peak reserved %.2f GiB over the timed steps; %.2f GiB "
                  "allocated between steps\n",
                  kforge::bench::gib(single.peak.allocated), kforge::bench::gib(single.peak.reserved),
                  kforge::bench::gib(single.resident_bytes));
      out["one_rank"]["peak_allocated_bytes"] = single.peak.allocated;
      out["one_rank"]["peak_reserved_bytes"] = single.peak.reserved;
      out["one_rank"]["resident_bytes"] = single.resident_bytes;
    }
    if (lora) out["one_rank"]["lora_check"] = solo.lora_check;
  }

  if (lora) {
    std::printf("data parallel: SKIP: LoRA runs on 1 rank here (the data-parallel checks compare full fine-tuning's "
                "weights)\n");
    out["data_parallel"] = {{"skipped", "LoRA: 1 rank"}};
  } else if (many.size() >= 2 && single.ok) {
    std::printf("%zu ranks on %s..%s:\n", many.size(), many.front().str().c_str(), many.back().str().c_str());
    auto dp = run(dir.string(), many, w, s.vocab, po);
    ok = ok && dp.ok;
    if (dp.ok) {
      json r = report(dp, many.size());
      const double speedup = spread::of(single.seconds).median / spread::of(dp.seconds).median;
      const double efficiency = speedup / static_cast<double>(many.size());
      bool same = true;
      for (int k = 1; k < dp.trainer->ranks(); ++k) same = same && kforge::model::max_weight_difference(*dp.trainer->rank(k).policy(), *dp.trainer->lead().policy()) == 0;
      const double diff =
          kforge::model::max_weight_difference(*dp.trainer->lead().policy(), *single.trainer->lead().policy());
      auto start = kforge::model::load_causal_lm(dir.string());  // fp32 on the CPU
      const double cos = start ? kforge::model::update_cosine(*dp.trainer->lead().policy(),
                                                              *single.trainer->lead().policy(), **start)
                               : 0.0;
      std::printf("  scaling efficiency %.1f %% (goal >= 85 %%: %s); ranks identical: %s; update vs 1 rank: cosine "
                  "%.4f, max |weight diff| %.3g\n",
                  100 * efficiency, efficiency >= 0.85 ? "met" : "NOT met", same ? "yes" : "NO", cos, diff);
      ok = ok && same && cos > 0.9;
      r["update_cosine_to_one_rank"] = cos;
      r["speedup"] = speedup;
      r["scaling_efficiency"] = efficiency;
      r["goal_85_met"] = efficiency >= 0.85;
      r["ranks_identical"] = same;
      r["max_weight_diff_to_one_rank"] = diff;

      // The same K ranks with each bucket of gradients summed during the backward pass, in the
      // background (NCCL ranks only: the CPU's thread ranks sum after it either way). The trainer
      // does this for ranks in processes of their own; these ranks are threads, so it is turned on
      // here for the measurement (data_parallel_options::in_process_background_sums says why it
      // is not the default for threads).
      auto during = cpu_smoke ? run_result{} : run(dir.string(), many, w, s.vocab, po, /*overlap=*/true);
      ok = ok && (cpu_smoke || during.ok);
      if (!cpu_smoke && during.ok) {
        const spread during_t = spread::of(during.seconds), after_t = spread::of(dp.seconds);
        const double moved =
            kforge::model::max_weight_difference(*during.trainer->lead().policy(), *dp.trainer->lead().policy());
        std::printf("  gradients summed during backward (%lld buckets started during it): %.3f s/step; after it: "
                    "%.3f s/step (%.1f %% %s); max |weight diff| between the two %.3g\n",
                    static_cast<long long>(during.buckets_in_backward), during_t.median, after_t.median,
                    100 * std::abs(1 - during_t.median / after_t.median),
                    during_t.median <= after_t.median ? "faster during" : "slower during", moved);
        r["sum_during_backward"] = {{"step_s", during_t.to_json()},
                                    {"buckets_in_backward", during.buckets_in_backward},
                                    {"max_weight_diff_to_after", moved}};
      }
      out["data_parallel"] = r;

#if defined(KFORGE_WITH_CUDA)
      if (!cpu_smoke) {
        std::vector<int> gpus;
        for (const auto& d : many) gpus.push_back(d.index());
        const auto like = single.trainer->lead().policy()->parameters();
        std::string why;
        const double ours = time_gradient_allreduce(like, gpus, 10, why);
        const auto elements = static_cast<std::size_t>(params.base);
        auto nccl = kt::nccl_allreduce_check(gpus, elements, 10);
        if (ours > 0 && nccl) {
          const double k = static_cast<double>(gpus.size());
          const double bytes = params.base * 4;
          const double ours_bw = bytes * 2 * (k - 1) / k / ours / 1e9;
          std::printf("gradient all-reduce, %.0f MB fp32 over %zu GPUs: ours %.2f ms (bus %.1f GB/s), NCCL alone %.2f ms "
                      "(bus %.1f GB/s): %.0f %% of NCCL\n",
                      bytes / 1e6, gpus.size(), ours * 1e3, ours_bw, nccl->median_us / 1e3, nccl->bus_bandwidth_gbs,
                      100 * ours_bw / nccl->bus_bandwidth_gbs);
          out["allreduce"] = {{"bytes", bytes}, {"ours_s", ours}, {"ours_bus_gbs", ours_bw},
                              {"nccl_s", nccl->median_us / 1e6}, {"nccl_bus_gbs", nccl->bus_bandwidth_gbs},
                              {"nccl_version", nccl->nccl_version}};
        } else {
          std::printf("gradient all-reduce: FAILED: %s\n", ours > 0 ? nccl.message().c_str() : why.c_str());
          ok = false;
        }
      }
#endif
    }
    if (cpu_smoke && dp.ok) {
      // The same ranks as processes would join them: over a socket group instead of a thread group.
      std::printf("%zu CPU ranks joined by a socket group (trainer.ranks = \"processes\"):\n", many.size());
      auto sock = run_socket_ranks(dir.string(), static_cast<int>(many.size()), w, s.vocab, po);
      ok = ok && sock.ok;
      if (sock.ok) {
        const double t_sock = spread::of(sock.seconds).median, t_threads = spread::of(dp.seconds).median;
        const bool same = kforge::model::max_weight_difference(*sock.trainer->lead().policy(), *dp.trainer->lead().policy()) == 0;
        std::printf("  %.3f s/step (%.3f..%.3f) vs thread ranks %.3f s/step: %.2fx; weights bit-identical to thread ranks: %s\n",
                    t_sock, spread::of(sock.seconds).min, spread::of(sock.seconds).max, t_threads, t_sock / t_threads,
                    same ? "yes" : "NO");
        ok = ok && same;
        out["socket_ranks"] = {{"seconds", sock.seconds}, {"step_s", spread::of(sock.seconds).to_json()},
                               {"thread_ranks_step_s", t_threads}, {"ratio_to_threads", t_sock / t_threads},
                               {"identical_to_thread_ranks", same}};
      }
    }
  } else if (!cpu_smoke) {
    std::printf("data parallel: SKIP: %zu GPU(s) to use (%d visible, --gpus %d)\n", many.size(), visible, max_gpus);
    out["data_parallel"] = {{"skipped", "fewer than 2 GPUs to use"}};
  }

  out["ok"] = ok;
  if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
  fs::remove_all(dir);
  std::printf("trainer_bench: %s\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}

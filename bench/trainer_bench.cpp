// trainer_bench: GRPO step throughput of the trainer, one GPU and data parallel.
//
//   trainer_bench [--json FILE] [--steps R] [--groups G] [--samples N] [--prompt-len P]
//                 [--completion-len C] [--micro-batch M] [--layers L] [--gpus K] [--fp32]
//                 [--peak-tflops F] [--cpu-smoke]
//
// Model: random weights in Qwen2.5-0.5B's shapes (bench/random_model.hpp; --layers shrinks it),
// loaded in fp32 by every rank (the master weights), forward and backward in bf16 (what the trainer
// stage does on GPUs; --fp32 computes in fp32). Workload: one
// TrainBatch of G = 8 groups x N = 8 samples, P = 256 random prompt tokens and C = 256 random
// completion tokens each, rewards that differ within every group (every group carries signal),
// on-policy; micro-batches of M = 8.
//
// Runs, each through trainer::data_parallel_trainer (what the trainer stage uses): 1 rank on GPU 0,
// then K ranks on GPUs 0..K-1 (K = every visible GPU, at most --gpus) on the same global batch.
// Each run: 1 warm-up step, then R = 5 timed steps; median (min..max). Reported per run:
//   - tokens/s: (P + C) x rows / step time (every position goes forward and backward);
//   - model FLOPs utilisation: (6 + 2) x parameters x tokens per step (policy forward + backward,
//     the frozen reference's forward; attention's quadratic part left out) / step time / K /
//     the GPU's dense peak for the compute dtype (--peak-tflops; default the H200's: 989 for bf16,
//     67 for fp32, since LibTorch does not use TF32 for fp32 matmuls by default);
//   - scaling efficiency of K ranks: (t_1 / t_K) / K (goal >= 85 %).
// All-reduce: the gradient all-reduce the trainer runs (all_reduce_gradients: buckets, one NCCL
// call each, copies back) on tensors of the model's parameter shapes, against NCCL's own
// all-reduce of one buffer of the same total size (trainer/nccl_check.hpp, nccl-tests' algorithm)
// in the same run: time and bus bandwidth (bytes x 2(K-1)/K / time) of each.
// The K-rank run sums the gradients after the backward pass (what in-process ranks do); it runs
// once more with each bucket summed during the backward pass (what ranks in processes do), for
// the step time of each.
// Checked while measuring: every step stepped with a finite loss and gradient norm; after the
// K-rank run every rank's weights equal rank 0's bit for bit, and rank 0's update (weights minus
// the starting ones) points where the 1-rank run's does (cosine > 0.9; bf16 rounding and AdamW
// make single weights differ). A failed check exits 1.
//
// Without a GPU it prints SKIP and exits 0, unless --cpu-smoke: a tiny model (hidden 64, 2 layers)
// and 2 CPU ranks (a thread group) run the same path, so the bench is checked anywhere; then the
// same 2 ranks joined by a socket group, as trainer.ranks = "processes" joins CPU ranks: step time
// against the thread ranks' and weights that must equal theirs bit for bit.
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
#include "model/weight_diff.hpp"
#include "trainer/collective.hpp"
#include "trainer/data_parallel_trainer.hpp"
#include "trainer/socket_group.hpp"
#if defined(KFORGE_WITH_CUDA)
#include "trainer/nccl_check.hpp"
#include "trainer/nccl_group.hpp"
#endif

namespace fs = std::filesystem;
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

struct run_result {
  std::vector<double> seconds;
  std::int64_t buckets_in_backward = 0;  ///< rank 0's gradient buckets summed during backward, last step
  bool ok = true;
  std::unique_ptr<kt::data_parallel_trainer> trainer;
};

run_result run(const std::string& model_dir, const std::vector<at::Device>& devices, const workload& w,
               std::int64_t vocab, bool bf16, bool overlap = false) {
  run_result out;
  kt::data_parallel_options o;
  o.model_dir = model_dir;
  o.devices = devices;
  o.trainer.step.lr = 1e-5;
  o.trainer.step.micro_batch_size = w.micro_batch;
  o.trainer.kl.initial_coef = 0.04;
  o.trainer.bf16_compute = bf16;
  o.trainer.step.overlap_grad_reduce = overlap;
  o.in_process_background_sums = overlap;  // this bench's ranks are threads: see nccl_group_options
  auto t = kt::data_parallel_trainer::create(o);
  if (!t) {
    std::printf("  FAILED to build %zu rank(s): %s\n", devices.size(), t.message().c_str());
    out.ok = false;
    return out;
  }
  for (int s = 0; s <= w.steps; ++s) {  // step 0 warms up
    const auto batch = make_batch(w, vocab, (*t)->lead().policy_version());
    sync_all(devices);
    const auto t0 = clk::now();
    auto st = (*t)->step(batch);
    sync_all(devices);
    const double sec = std::chrono::duration<double>(clk::now() - t0).count();
    if (!st || !st->grpo.stepped || !std::isfinite(st->grpo.loss.loss) || !std::isfinite(st->grpo.grad_norm)) {
      std::printf("  FAILED step %d: %s\n", s, st ? "did not step, or a non-finite loss / gradient norm" : st.message().c_str());
      out.ok = false;
      return out;
    }
    if (s > 0) out.seconds.push_back(sec);
    out.buckets_in_backward = st->grpo.buckets_reduced_in_backward;
    std::printf("  step %d: %.3f s, loss %.4f, grad norm %.3f%s\n", s, sec, st->grpo.loss.loss, st->grpo.grad_norm,
                s == 0 ? " (warm-up)" : "");
  }
  out.trainer = std::move(*t);
  return out;
}


// `k` CPU ranks as a trainer with trainer.ranks = "processes" runs them, joined by a socket group
// (trainer/socket_group.hpp) — here each on a thread of its own with its own socket, the same
// messages as between processes — stepping the same batches as run(); rank 0's trainer and its
// step times (all ranks step in lockstep).
run_result run_socket_ranks(const std::string& model_dir, int k, const workload& w, std::int64_t vocab) {
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
    o.trainer.step.lr = 1e-5;
    o.trainer.step.micro_batch_size = w.micro_batch;
    o.trainer.kl.initial_coef = 0.04;
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

}  // namespace

int main(int argc, char** argv) {
  std::string json_path;
  workload w;
  kforge::bench::shape s;
  bool cpu_smoke = false, fp32 = false;
  int max_gpus = 8;
  double peak_tflops = 0;
  std::int64_t layers = -1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string("x"); };
    try {
      if (a == "--json") json_path = next();
      else if (a == "--steps") w.steps = std::stoi(next());
      else if (a == "--groups") w.groups = std::stoll(next());
      else if (a == "--samples") w.samples = std::stoll(next());
      else if (a == "--prompt-len") w.prompt_len = std::stoll(next());
      else if (a == "--completion-len") w.completion_len = std::stoll(next());
      else if (a == "--micro-batch") w.micro_batch = std::stoll(next());
      else if (a == "--layers") layers = std::stoll(next());
      else if (a == "--gpus") max_gpus = std::stoi(next());
      else if (a == "--peak-tflops") peak_tflops = std::stod(next());
      else if (a == "--cpu-smoke") cpu_smoke = true;
      else if (a == "--fp32") fp32 = true;
      else throw std::invalid_argument(a);
      if (w.steps < 1 || w.groups < 1 || w.samples < 2 || w.prompt_len < 1 || w.completion_len < 1 ||
          w.micro_batch < 1 || max_gpus < 1 || peak_tflops < 0)
        throw std::invalid_argument(a);
    } catch (const std::exception&) {
      std::fprintf(stderr,
                   "usage: %s [--json FILE] [--steps R>=1] [--groups G>=1] [--samples N>=2] [--prompt-len P] "
                   "[--completion-len C] [--micro-batch M] [--layers L] [--gpus K] [--fp32] [--peak-tflops F] [--cpu-smoke]\n",
                   argv[0]);
      return 2;
    }
  }
  const int visible = torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
  if (visible == 0 && !cpu_smoke) {
    std::printf("trainer_bench: SKIP: no CUDA device visible to LibTorch (--cpu-smoke runs a tiny model on 2 CPU ranks)\n");
    return 0;
  }
  if (cpu_smoke) {
    s = {64, 2, 4, 2, 128, 512, 1, 2};
    w = {2, 4, 16, 16, 4, std::min(w.steps, 2)};
  }
  if (layers > 0) s.layers = layers;
  const bool bf16 = !fp32 && !cpu_smoke;  // the CPU smoke computes in fp32, as the stage does there
  if (peak_tflops == 0) peak_tflops = bf16 ? 989.0 : 67.0;
  const std::vector<at::Device> one = {cpu_smoke ? at::Device(at::kCPU) : at::Device(at::kCUDA, 0)};
  std::vector<at::Device> many;
  if (cpu_smoke) many = {at::Device(at::kCPU), at::Device(at::kCPU)};
  for (int g = 0; !cpu_smoke && g < std::min(visible, max_gpus); ++g)
    many.push_back(at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(g)));

  const fs::path dir = fs::temp_directory_path() / ("kforge-trainer-bench-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  if (auto st = kforge::bench::write_random_checkpoint(s, dir.string()); !st) {
    std::fprintf(stderr, "trainer_bench: %s\n", st.message().c_str());
    return 1;
  }
  const double rows = static_cast<double>(w.groups * w.samples);
  const double tokens = rows * static_cast<double>(w.prompt_len + w.completion_len);
  std::printf("trainer_bench: %s, %lld layers x hidden %lld, %s compute on fp32 weights; %lld groups x %lld samples x (%lld prompt + %lld "
              "completion) tokens, micro-batch %lld, %d timed steps\n",
              cpu_smoke ? "CPU smoke" : "GPU", static_cast<long long>(s.layers), static_cast<long long>(s.hidden),
              bf16 ? "bf16" : "fp32", static_cast<long long>(w.groups), static_cast<long long>(w.samples), static_cast<long long>(w.prompt_len),
              static_cast<long long>(w.completion_len), static_cast<long long>(w.micro_batch), w.steps);

  json out;
  out["model"] = kforge::bench::config_json(s);
  out["workload"] = {{"groups", w.groups}, {"samples", w.samples}, {"prompt_len", w.prompt_len},
                     {"completion_len", w.completion_len}, {"micro_batch", w.micro_batch}, {"steps", w.steps},
                     {"tokens_per_step", tokens}};
  out["peak_tflops"] = peak_tflops;
  out["compute"] = bf16 ? "bf16" : "fp32";
  bool ok = true;

  std::printf("1 rank on %s:\n", one.front().str().c_str());
  auto single = run(dir.string(), one, w, s.vocab, bf16);
  ok = ok && single.ok;
  double params = 0;
  if (single.trainer)
    for (const auto& p : single.trainer->lead().policy()->parameters()) params += static_cast<double>(p.numel());
  out["parameters"] = params;
  const auto report = [&](const run_result& r, std::size_t ranks) {
    const spread t = spread::of(r.seconds);
    const double flops = 8.0 * params * tokens;
    const double mfu = flops / t.median / static_cast<double>(ranks) / (peak_tflops * 1e12);
    std::printf("  %zu rank(s): %.3f s/step (%.3f..%.3f), %.0f tokens/s, MFU %.1f %% of %.0f TFLOP/s per GPU\n", ranks,
                t.median, t.min, t.max, tokens / t.median, 100 * mfu, peak_tflops);
    return json{{"ranks", ranks}, {"seconds", r.seconds}, {"step_s", t.to_json()}, {"tokens_per_s", tokens / t.median},
                {"mfu", mfu}};
  };
  if (single.ok) out["one_rank"] = report(single, 1);

  if (many.size() >= 2 && single.ok) {
    std::printf("%zu ranks on %s..%s:\n", many.size(), many.front().str().c_str(), many.back().str().c_str());
    auto dp = run(dir.string(), many, w, s.vocab, bf16);
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
      auto during = cpu_smoke ? run_result{} : run(dir.string(), many, w, s.vocab, bf16, /*overlap=*/true);
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
        const auto elements = static_cast<std::size_t>(params);
        auto nccl = kt::nccl_allreduce_check(gpus, elements, 10);
        if (ours > 0 && nccl) {
          const double k = static_cast<double>(gpus.size());
          const double bytes = params * 4;
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
      auto sock = run_socket_ranks(dir.string(), static_cast<int>(many.size()), w, s.vocab);
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

// sandbox_bench: the sandbox's speed on one GPU host, with the anchor measured in the same run.
//
//   sandbox_bench [--json FILE] [--candidates N] [--jobs J] [--runners R] [--reference-servers K]
//                 [--no-anchor] [--no-ipc] [--no-confine]
//
// --no-ipc: outputs go to the reference server as files through the host (run_options::
// share_outputs), for a comparison with CUDA IPC on the same host.
// --reference-servers K: reference servers per GPU (default 0: one per runner); 1 serves every
// runner from one server, for a comparison on the same host.
// --no-confine: candidate children without the OS confinement and seccomp filter
// (run_options::confine), for a comparison of what confinement costs on the same host.
// 1. Anchor: a KernelBench-style torch.utils.cpp_extension.load_inline build of a ReLU kernel
//    (python3 + PyTorch, as KernelBench does it) next to the ABI's nvcc build of the same kernel.
// 2. Latency: 8 candidates one at a time on an idle pool, cold cache: per-candidate wall time
//    and its compile / verify / time parts.
// 3. Throughput: N candidates (the suite's correct kernels, each made unique by a comment so the
//    compile cache cannot help) with J worker threads (default 24: on the 16-core H200 host, 16
//    left the runners idle a third of the time and 32 was no better) and R runners on GPU 0; then
//    the same N again with a warm cache (every compile a cache hit). Each batch's rate, and its
//    sustained rate: while every job is busy (between the J-th verdict and the N-J-th), what a
//    run's steady stream of candidates gets; the goal (>= 6/s) is read on it.
// 4. Repeatability: three kernels timed in two separate pools; their medians must agree within 3%.
// Correctness is checked throughout: a candidate expected ok that is not ok is counted and shown.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/parallel.hpp"
#include "common/subprocess.hpp"
#include "sandbox/pool.hpp"
#include "sandbox/timing_stats.hpp"
#include "sandbox/verdict_json.hpp"
#include "tasks/builtin.hpp"

namespace fs = std::filesystem;
namespace ks = kforge::sandbox;
using json = nlohmann::json;
using clk = std::chrono::steady_clock;

namespace {

struct candidate {
  std::string name;
  const kforge::tasks::task* task;
  std::string source;
};

double since_ms(clk::time_point t) {
  return std::chrono::duration<double, std::milli>(clk::now() - t).count();
}

json stats_json(const std::vector<double>& v) {
  const auto s = ks::summarize_trials(v);
  return {{"median", s.median_ms}, {"p25", s.p25_ms}, {"p75", s.p75_ms}, {"n", s.trials},
          {"max", v.empty() ? 0.0 : *std::max_element(v.begin(), v.end())}};
}

std::string read(const fs::path& p) {
  std::ifstream is(p);
  std::stringstream ss;
  ss << is.rdbuf();
  return ss.str();
}

struct batch_result {
  double seconds = 0;
  std::vector<json> verdicts;
  std::vector<double> wall_ms;
  std::vector<double> done_s;  ///< when each verdict came, seconds after the batch began
  int not_ok = 0;
};

// The rate while every job is busy: between the `jobs`-th verdict (the pipeline has filled) and
// the one after which fewer than `jobs` candidates are left (it drains). A run of the sandbox gets
// a steady stream of candidates, so this is its throughput; a batch's own rate also counts the
// first compile with nothing to verify and the last verifications with nothing to compile. 0 when
// the batch is too short to have such a window.
double sustained_per_second(const batch_result& b, int jobs) {
  std::vector<double> t = b.done_s;
  std::sort(t.begin(), t.end());
  const auto first = static_cast<std::ptrdiff_t>(jobs) - 1;
  const auto last = static_cast<std::ptrdiff_t>(t.size()) - jobs - 1;
  if (first < 0 || last <= first || t[static_cast<std::size_t>(last)] <= t[static_cast<std::size_t>(first)]) return 0;
  return static_cast<double>(last - first) / (t[static_cast<std::size_t>(last)] - t[static_cast<std::size_t>(first)]);
}

batch_result run_batch(ks::sandbox_pool& pool, const std::vector<candidate>& cands, int jobs,
                       std::uint64_t seed) {
  batch_result r;
  r.verdicts.resize(cands.size());
  r.wall_ms.resize(cands.size());
  r.done_s.resize(cands.size());
  const auto t0 = clk::now();
  kforge::parallel_for(cands.size(), jobs, [&](std::size_t k) {
    const auto t = clk::now();
    r.verdicts[k] = ks::verdict_json(pool.evaluate(*cands[k].task, cands[k].source, seed));
    r.wall_ms[k] = since_ms(t);
    r.done_s[k] = since_ms(t0) / 1000.0;
  });
  r.seconds = since_ms(t0) / 1000.0;
  for (std::size_t k = 0; k < cands.size(); ++k)
    if (r.verdicts[k].value("status", "") != "ok") {
      ++r.not_ok;
      std::printf("  NOT OK %s: %s\n", cands[k].name.c_str(), r.verdicts[k].dump().substr(0, 300).c_str());
    }
  return r;
}

json parts(const batch_result& b) {
  std::vector<double> c, v, t;
  for (const auto& j : b.verdicts) {
    c.push_back(j.value("compile_ms", 0.0));
    v.push_back(j.value("verify_ms", 0.0));
    t.push_back(j.value("time_ms", 0.0));
  }
  return {{"wall_ms", stats_json(b.wall_ms)}, {"compile_ms", stats_json(c)},
          {"verify_ms", stats_json(v)}, {"time_ms", stats_json(t)}};
}

// The runners' time per candidate, by phase, between two snapshots (run_phases).
json phases_json(const ks::run_phases& p) {
  const double n = std::max(1, p.candidates);
  json j = {{"candidates", p.candidates}};
  for (const auto& [name, c] : ks::run_phases::counts()) j[name] = p.*c;
  for (const auto& [name, f] : ks::run_phases::fields()) j[name] = p.*f / n;
  return j;
}

void print_phases(const char* what, const json& j) {
  std::printf("  runner time per candidate, %s (mean ms):", what);
  for (const auto& [name, f] : ks::run_phases::fields())
    std::printf(" %.*s %.0f", static_cast<int>(std::strlen(name) - 3), name, j.at(name).get<double>());
  std::printf("\n    children started %d, recycled by the leak check %d, leak checks on device-wide "
              "free memory %d, speedups re-timed %d\n",
              j.at("children_started").get<int>(), j.at("leak_recycles").get<int>(),
              j.at("device_wide_leak_checks").get<int>(), j.at("confirmations").get<int>());
}

const char* load_inline_script = R"PY(
import time, torch, tempfile
from torch.utils.cpp_extension import load_inline
cuda_src = r'''
__global__ void relu_kernel(const float* x, float* y, long n) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
torch::Tensor relu(torch::Tensor x) {
  auto y = torch::empty_like(x);
  long n = x.numel();
  relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
  return y;
}
'''
cpp_src = "torch::Tensor relu(torch::Tensor x);"
t = time.time()
m = load_inline(name="kf_relu_anchor", cpp_sources=cpp_src, cuda_sources=cuda_src,
                functions=["relu"], build_directory=tempfile.mkdtemp(), verbose=False)
x = torch.randn(1 << 20, device="cuda")
assert torch.equal(m.relu(x), torch.relu(x))
print("LOAD_INLINE_SECONDS", time.time() - t)
)PY";

}  // namespace

int main(int argc, char** argv) {
  // Line by line even into a file: a run ended by a time limit still shows what it measured.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string json_path;
  int n = 120, jobs = 24, runners = 4, reference_servers = 0;
  bool share_outputs = true;
  bool anchor = true;
  bool confine = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--json") json_path = next();
    else if (a == "--candidates") n = std::stoi(next());
    else if (a == "--jobs") jobs = std::stoi(next());
    else if (a == "--runners") runners = std::stoi(next());
    else if (a == "--reference-servers") reference_servers = std::stoi(next());
    else if (a == "--no-anchor") anchor = false;
    else if (a == "--no-ipc") share_outputs = false;
    else if (a == "--no-confine") confine = false;
    else {
      std::fprintf(stderr,
                   "usage: %s [--json FILE] [--candidates N] [--jobs J] [--runners R] [--reference-servers K] "
                   "[--no-anchor] [--no-ipc] [--no-confine]\n",
                   argv[0]);
      return 2;
    }
  }
  if (ks::visible_gpu_count() == 0) {
    std::printf("sandbox_bench: SKIP: no GPU visible\n");
    return 0;
  }
  auto library = kforge::tasks::builtin_tasks();
  if (!library) return std::fprintf(stderr, "%s\n", library.message().c_str()), 1;
  std::map<std::string, const kforge::tasks::task*> by_id;
  for (const auto& t : *library) by_id[t.id] = &t;

  // The suite's correct kernels.
  const fs::path suite = fs::path(KFORGE_SOURCE_DIR) / "tests/sandbox/suite";
  std::vector<candidate> good;
  {
    std::ifstream is(suite / "suite.jsonl");
    for (std::string line; std::getline(is, line);) {
      if (line.empty()) continue;
      const auto j = json::parse(line);
      if (!j.at("expect").is_string() || j.at("expect") != "ok") continue;
      auto t = by_id.find(j.at("task").get<std::string>());
      if (t == by_id.end()) continue;
      good.push_back({j.at("file"), t->second, read(suite / j.at("file").get<std::string>())});
    }
  }
  if (good.empty()) return std::fprintf(stderr, "no correct kernels in the suite\n"), 1;
  auto unique = [&](int count, const std::string& tag) {
    std::vector<candidate> out;
    for (int i = 0; i < count; ++i) {
      candidate c = good[i % good.size()];
      c.source += "\n// kforge sandbox_bench " + tag + " " + std::to_string(i) + "\n";
      c.name += "#" + std::to_string(i);
      out.push_back(std::move(c));
    }
    return out;
  };

  const fs::path work = fs::temp_directory_path() / ("kforge-sandbox-bench-" + std::to_string(::getpid()));
  fs::remove_all(work);
  fs::create_directories(work / "cache");
  auto make_pool = [&](const std::string& cache, int r) {
    ks::pool_options po;
    po.eval.compile.cache_dir = cache;
    po.work_dir = cache;
    po.run.program = KFORGE_BINARY;
    po.gpus = {0};
    po.runners_per_gpu = r;
    po.reference_servers = reference_servers;
    po.run.share_outputs = share_outputs;
    po.run.confine = confine;
    return ks::sandbox_pool::create(po);
  };
  json out;
  out["reference_servers_per_gpu"] = reference_servers;  // 0: one per runner
  out["outputs_by"] = share_outputs ? "cuda_ipc" : "files";
  out["candidate_children"] = ks::describe_candidate_confinement(confine);
  std::printf("sandbox_bench: %s\n", out["candidate_children"].get<std::string>().c_str());
  out["host_cores"] = std::thread::hardware_concurrency();

  // 1. Anchor.
  if (anchor) {
    const auto t = clk::now();
    auto py = kforge::run_process({"python3", "-c", load_inline_script}, std::chrono::minutes(8));
    const double ms = since_ms(t);
    const bool ok = py && py->exit_code == 0 &&
                    py->output.find("LOAD_INLINE_SECONDS") != std::string::npos;
    std::printf("anchor: load_inline build + first call: %.1f s (%s)\n", ms / 1000, ok ? "ok" : "FAILED");
    if (!ok && py) std::printf("%s\n", py->output.substr(0, 2000).c_str());
    out["load_inline_ms"] = ok ? ms : -1.0;
  }
  auto pool = make_pool((work / "cache").string(), runners);
  if (!pool) return std::fprintf(stderr, "pool: %s\n", pool.message().c_str()), 1;
  std::printf("sandbox: %s\n", (*pool)->describe().c_str());
  {
    // Every child and reference server up before anything is measured: the goals are about a
    // pool that is running (a sandbox worker starts them once per run, stages/sandbox_stage).
    const auto t = clk::now();
    if (auto st = (*pool)->start_all(); !st) return std::fprintf(stderr, "pool: %s\n", st.err().message.c_str()), 1;
    out["pool_start_ms"] = since_ms(t);
    std::printf("pool: every child and reference server started in %.1f s\n", since_ms(t) / 1000);
  }
  {
    // The ABI build of the same ReLU, cold (unique source), through the pool.
    auto one = unique(1, "anchor");
    const auto b = run_batch(**pool, one, 1, 7);
    std::printf("anchor: ABI nvcc build %s: compile %.0f ms, whole verdict %.0f ms\n",
                one[0].name.c_str(), b.verdicts[0].value("compile_ms", 0.0), b.wall_ms[0]);
    out["abi_compile_ms"] = b.verdicts[0].value("compile_ms", 0.0);
    out["abi_verdict_ms"] = b.wall_ms[0];
  }

  // 2. Latency, one at a time.
  const auto lat = run_batch(**pool, unique(8, "latency"), 1, 11);
  out["latency"] = parts(lat);
  out["latency"]["not_ok"] = lat.not_ok;
  std::printf("latency (1 at a time, cold compile): median %.0f ms (compile %.0f, verify %.0f, time %.0f), not ok %d\n",
              out["latency"]["wall_ms"]["median"].get<double>(),
              out["latency"]["compile_ms"]["median"].get<double>(),
              out["latency"]["verify_ms"]["median"].get<double>(),
              out["latency"]["time_ms"]["median"].get<double>(), lat.not_ok);

  // 3. Throughput, cold then warm cache.
  const auto batch = unique(n, "batch");
  const auto before_cold = (*pool)->phases();
  const auto cold = run_batch(**pool, batch, jobs, 13);
  const auto before_warm = (*pool)->phases();
  const auto warm = run_batch(**pool, batch, jobs, 17);
  const auto after_warm = (*pool)->phases();
  int hits = 0;
  for (const auto& v : warm.verdicts) hits += v.value("compile_ms", 1e9) < 200 ? 1 : 0;
  out["cold"] = parts(cold);
  out["cold"]["seconds"] = cold.seconds;
  out["cold"]["per_second"] = n / cold.seconds;
  const double sustained = sustained_per_second(cold, jobs);
  out["cold"]["sustained_per_second"] = sustained;
  out["cold"]["not_ok"] = cold.not_ok;
  out["warm"] = parts(warm);
  out["warm"]["seconds"] = warm.seconds;
  out["warm"]["per_second"] = n / warm.seconds;
  out["warm"]["sustained_per_second"] = sustained_per_second(warm, jobs);
  out["warm"]["not_ok"] = warm.not_ok;
  out["warm"]["cache_hits_under_200ms"] = hits;
  out["cold"]["runner_phases"] = phases_json(before_warm - before_cold);
  out["warm"]["runner_phases"] = phases_json(after_warm - before_warm);
  std::printf("throughput: %d candidates, %d jobs, %d runners: cold %.1f s = %.2f/s (not ok %d); "
              "warm cache %.1f s = %.2f/s (%d fast hits, not ok %d)\n",
              n, jobs, runners, cold.seconds, n / cold.seconds, cold.not_ok, warm.seconds,
              n / warm.seconds, hits, warm.not_ok);
  std::printf("  sustained (verdicts %d to %d, every job busy): cold %.2f/s, warm %.2f/s\n", jobs, n - jobs - 1,
              sustained, out["warm"]["sustained_per_second"].get<double>());
  print_phases("cold", out["cold"]["runner_phases"]);
  print_phases("warm", out["warm"]["runner_phases"]);

  // 4. Repeatability: the same kernels timed by two separate pools.
  pool->reset();
  json rep = json::array();
  double worst = 0;
  {
    std::vector<candidate> three;
    for (const auto& g : good)
      if (three.size() < 3 && (g.name.find("softmax") != std::string::npos ||
                               g.name.find("matmul") != std::string::npos ||
                               g.name.find("relu") != std::string::npos))
        three.push_back(g);
    std::vector<std::vector<double>> medians(2);
    for (int e = 0; e < 2; ++e) {
      auto p = make_pool((work / "cache").string(), 1);
      if (!p) return std::fprintf(stderr, "pool: %s\n", p.message().c_str()), 1;
      const auto b = run_batch(**p, three, 1, 99);
      for (const auto& v : b.verdicts) medians[e].push_back(v.value("candidate_ms", 0.0));
    }
    for (std::size_t i = 0; i < three.size(); ++i) {
      const double a = medians[0][i], b = medians[1][i];
      const double d = std::min(a, b) > 0 ? std::abs(a - b) / std::min(a, b) : 1.0;
      worst = std::max(worst, d);
      rep.push_back({{"kernel", three[i].name}, {"first_ms", a}, {"second_ms", b}, {"diff", d}});
      std::printf("repeatability: %-28s %.4f ms vs %.4f ms: %.2f%%\n", three[i].name.c_str(), a, b, 100 * d);
    }
  }
  out["repeatability"] = rep;

  const double median_verdict_s = out["latency"]["wall_ms"]["median"].get<double>() / 1000;
  const bool goal_latency = median_verdict_s <= 3.0;
  // The goal is a sustained rate; the batch's own rate (fill and drain included) is shown with it.
  const bool goal_throughput = sustained >= 6.0;
  const bool goal_repeat = worst <= 0.03;
  out["goals"] = {{"median_verdict_le_3s", goal_latency},
                  {"cold_sustained_ge_6_per_s", goal_throughput},
                  {"repeat_within_3pct", goal_repeat}};
  std::printf("goals: median verdict %.2f s <= 3 s: %s; %.2f candidates/s sustained (batch %.2f/s) >= 6: %s; "
              "repeat within 3%%: %s (worst %.2f%%)\n",
              median_verdict_s, goal_latency ? "met" : "NOT met", sustained, n / cold.seconds,
              goal_throughput ? "met" : "NOT met", goal_repeat ? "met" : "NOT met", 100 * worst);
  if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
  fs::remove_all(work);
  return cold.not_ok + warm.not_ok + lat.not_ok > 0 ? 1 : 0;
}

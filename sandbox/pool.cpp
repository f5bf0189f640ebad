#include "sandbox/pool.hpp"

#include <cstdlib>
#include <filesystem>

#include "common/gpu_arch.hpp"
#include "common/log.hpp"
#include "common/parallel.hpp"
#include "common/subprocess.hpp"
#include "sandbox/ncu_profiler.hpp"

namespace kforge::sandbox {

std::string sandbox_program() {
  if (const char* p = std::getenv("KFORGE_SANDBOX_PROGRAM"); p && *p) return p;
  return self_executable();
}

result<gpu_facts> probe_gpu_facts(int gpu, const std::string& program) {
  run_options ro;
  ro.program = program.empty() ? sandbox_program() : program;
  ro.gpu = gpu;
  gpu_slot slot(ro);  // its reference server holds the CUDA context; gone when slot goes
  auto facts = slot.facts();
  if (!facts) return error{"GPU " + std::to_string(gpu) + ": " + facts.err().message};
  return facts;
}

result<resolved_arch> resolve_arch(const std::string& setting, const std::optional<gpu_facts>& first_gpu) {
  if (setting != auto_arch) {
    if (!valid_arch(setting))
      return error{"arch '" + setting + "': expected \"auto\" (the sandbox GPU's architecture) or one nvcc target "
                   "such as sm_80, sm_89, sm_90a, sm_100a"};
    return resolved_arch{setting, "set", false};
  }
  // A compile-only host compiles for the GPUs kforge's runs are sized for; the banner says so.
  if (!first_gpu)
    return resolved_arch{std::string(default_arch), "auto with no GPU to ask: Hopper's, by default", true};
  const std::string arch = arch_for_compute_capability(first_gpu->major, first_gpu->minor);
  if (arch.empty())
    return error{"arch auto: " + first_gpu->name + " reports no compute capability; set the arch explicitly"};
  return resolved_arch{arch, "auto: " + first_gpu->name + "'s compute capability " +
                                 std::to_string(first_gpu->major) + "." + std::to_string(first_gpu->minor),
                       true};
}

namespace {

// The first GPU's facts where "auto" needs them, else none. Asked of a reference server of its own:
// the pool's slots fix their probe library, built for the resolved target, when they are made.
// One extra CUDA context start at pool creation, and only for "auto".
result<std::optional<gpu_facts>> facts_for_arch(const pool_options& o) {
  if (o.eval.compile.arch != auto_arch || o.compile_only || o.gpus.empty())
    return std::optional<gpu_facts>{};
  auto facts = probe_gpu_facts(o.gpus.front(), o.run.program);
  if (!facts) return error{facts.message() + " (asked for its architecture: arch auto)"};
  return std::optional<gpu_facts>(*facts);
}

// A library for an `a` target runs on that compute capability only, a plain one on its family's:
// "auto" builds one target, so GPUs that would want different ones cannot share a pool.
status check_same_target(const resolved_arch& arch, const gpu_facts& facts, int gpu) {
  if (!arch.automatic || facts.arch() == arch.arch) return {};
  return error{"GPU " + std::to_string(gpu) + " (" + facts.name + ") wants " + facts.arch() + ", the first GPU " +
               arch.arch + ": arch auto builds for one target; list GPUs of one kind or set the arch to one "
               "they all run"};
}

}  // namespace

result<std::unique_ptr<sandbox_pool>> sandbox_pool::create(pool_options options) {
  std::unique_ptr<sandbox_pool> pool(new sandbox_pool(std::move(options)));
  auto& o = pool->options_;
  // nvcc runs in its own scratch directory: a relative cache path would point elsewhere there.
  std::error_code ec;
  if (!o.eval.compile.cache_dir.empty())
    o.eval.compile.cache_dir = std::filesystem::absolute(o.eval.compile.cache_dir, ec).string();
  if (!o.work_dir.empty()) o.work_dir = std::filesystem::absolute(o.work_dir, ec).string();
  // The children are `kforge sandbox-child|sandbox-ref`: this executable when it is kforge, or
  // the one KFORGE_SANDBOX_PROGRAM names (tests and other programs that embed the sandbox).
  if (o.run.program.empty()) o.run.program = sandbox_program();
  if (!o.compile_only && o.gpus.empty())
    for (int g = 0; g < visible_gpu_count(); ++g) o.gpus.push_back(g);
  // The target first: the evaluator's compiles, static checks and cache keys all carry it.
  auto first_gpu = facts_for_arch(o);
  if (!first_gpu) return error{first_gpu.message()};
  auto arch = resolve_arch(o.eval.compile.arch, *first_gpu);
  if (!arch) return error{arch.message()};
  pool->arch_ = *arch;
  o.eval.compile.arch = arch->arch;
  auto ev = evaluator::create(o.eval);
  if (!ev) return error{ev.err().message};
  pool->evaluator_.emplace(std::move(*ev));
  if (o.compile_only || o.gpus.empty()) {
    pool->compile_only_reason_ = o.compile_only ? "asked for" : "no GPU visible";
    return pool;
  }
  auto probe = pool->evaluator_->probe_library(o.work_dir.empty() ? "/tmp" : o.work_dir);
  if (!probe) return error{"for " + arch->arch + " (" + arch->how + "): " + probe.err().message};
  o.run.probe_library = *probe;
  if (o.run.profile) {
    // From the configured path (or none: the usual places) to the one the runners start.
    auto ncu = find_ncu(o.run.ncu);
    o.run.ncu = ncu ? *ncu : std::string();
    if (!ncu) {
      o.run.ncu_missing = ncu.err().message;
      kforge::log::warn("sandbox: no Nsight Compute profiles of correct kernels: " + o.run.ncu_missing);
    }
  }
  for (const int g : o.gpus) {
    run_options ro = o.run;
    ro.gpu = g;
    ro.reference_servers = o.reference_servers > 0 ? o.reference_servers : std::max(1, o.runners_per_gpu);
    auto slot = std::make_shared<gpu_slot>(ro);
    auto facts = slot->facts();
    if (!facts) return error{"GPU " + std::to_string(g) + ": " + facts.err().message};
    if (auto st = check_same_target(*arch, *facts, g); !st) return error{st.err().message};
    if (!pool->facts_) pool->facts_ = *facts;
    pool->slots_.push_back(slot);
    for (int i = 0; i < std::max(1, o.runners_per_gpu); ++i)
      pool->free_.push_back(std::make_unique<runner>(slot));
  }
  return pool;
}

sandbox_pool::~sandbox_pool() = default;

std::unique_ptr<runner> sandbox_pool::borrow() {
  std::unique_lock lock(mutex_);
  free_cv_.wait(lock, [&] { return !free_.empty(); });
  auto r = std::move(free_.back());
  free_.pop_back();
  return r;
}

void sandbox_pool::give_back(std::unique_ptr<runner> r) {
  {
    std::lock_guard lock(mutex_);
    free_.push_back(std::move(r));
  }
  free_cv_.notify_one();
}

wire::VerdictT sandbox_pool::evaluate(const tasks::task& t, std::string_view source,
                                      std::uint64_t seed) {
  if (slots_.empty()) return evaluator_->evaluate(t, source, {});
  return evaluator_->evaluate(t, source, [&](const tasks::task& task, const std::string& lib) {
    auto r = borrow();
    // The runner goes back even if run() throws (it does not; this keeps the pool whole anyway).
    struct returner {
      sandbox_pool* pool;
      std::unique_ptr<runner>* held;
      ~returner() { pool->give_back(std::move(*held)); }
    } back{this, &r};
    return r->run(task, lib, seed);
  });
}

status sandbox_pool::start_all() {
  std::lock_guard lock(mutex_);  // the runners stay in free_; nobody borrows meanwhile
  std::vector<std::string> errors(slots_.size() + free_.size());
  parallel_for(errors.size(), static_cast<int>(errors.size()), [&](std::size_t i) {
    auto st = i < slots_.size() ? slots_[i]->start_servers() : free_[i - slots_.size()]->start();
    if (!st) errors[i] = st.err().message;
  });
  for (const auto& e : errors)
    if (!e.empty()) return error{e};
  return {};
}

run_phases sandbox_pool::phases() const {
  run_phases sum;
  for (const auto& s : slots_) sum += s->phases();
  return sum;
}

std::string sandbox_pool::describe() const {
  const std::string nvcc =
      "nvcc " + evaluator_->tools().release + ", for " + arch_.arch + " (" + arch_.how + ")";
  if (slots_.empty()) return "compile-only (" + compile_only_reason_ + "), " + nvcc;
  return std::to_string(slots_.size()) + " GPU(s) (" + facts_->name + "), " +
         std::to_string(options_.runners_per_gpu) + " runner(s) each, " + nvcc + "; candidate children: " +
         describe_candidate_confinement(options_.run.confine) + "; " + describe_profiles();
}

std::string sandbox_pool::describe_profiles() const {
  const auto& r = options_.run;
  if (!r.profile) return "profiles: off";
  if (r.ncu.empty()) return "profiles: none (" + r.ncu_missing + ")";
  return "profiles: " + r.ncu + ", at most " + std::to_string(r.profile_time_limit.count() / 1000) + " s each";
}

}  // namespace kforge::sandbox

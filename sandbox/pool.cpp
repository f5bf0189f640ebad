#include "sandbox/pool.hpp"

#include <cstdlib>
#include <filesystem>

#include "common/parallel.hpp"
#include "common/subprocess.hpp"

namespace kforge::sandbox {

std::string sandbox_program() {
  if (const char* p = std::getenv("KFORGE_SANDBOX_PROGRAM"); p && *p) return p;
  return self_executable();
}

result<gpu_facts> probe_gpu_facts(int gpu) {
  run_options ro;
  ro.program = sandbox_program();
  ro.gpu = gpu;
  gpu_slot slot(ro);  // its reference server holds the CUDA context; gone when slot goes
  auto facts = slot.facts();
  if (!facts) return error{"GPU " + std::to_string(gpu) + ": " + facts.err().message};
  return facts;
}

result<std::unique_ptr<sandbox_pool>> sandbox_pool::create(pool_options options) {
  std::unique_ptr<sandbox_pool> pool(new sandbox_pool(std::move(options)));
  auto& o = pool->options_;
  // nvcc runs in its own scratch directory: a relative cache path would point elsewhere there.
  std::error_code ec;
  if (!o.eval.compile.cache_dir.empty())
    o.eval.compile.cache_dir = std::filesystem::absolute(o.eval.compile.cache_dir, ec).string();
  if (!o.work_dir.empty()) o.work_dir = std::filesystem::absolute(o.work_dir, ec).string();
  auto ev = evaluator::create(o.eval);
  if (!ev) return error{ev.err().message};
  pool->evaluator_.emplace(std::move(*ev));
  if (o.compile_only) {
    pool->compile_only_reason_ = "asked for";
    return pool;
  }
  if (o.gpus.empty())
    for (int g = 0; g < visible_gpu_count(); ++g) o.gpus.push_back(g);
  if (o.gpus.empty()) {
    pool->compile_only_reason_ = "no GPU visible";
    return pool;
  }
  // The children are `kforge sandbox-child|sandbox-ref`: this executable when it is kforge, or
  // the one KFORGE_SANDBOX_PROGRAM names (tests and other programs that embed the sandbox).
  if (o.run.program.empty()) o.run.program = sandbox_program();
  auto probe = pool->evaluator_->probe_library(o.work_dir.empty() ? "/tmp" : o.work_dir);
  if (!probe) return error{probe.err().message};
  o.run.probe_library = *probe;
  for (const int g : o.gpus) {
    run_options ro = o.run;
    ro.gpu = g;
    ro.reference_servers = o.reference_servers > 0 ? o.reference_servers : std::max(1, o.runners_per_gpu);
    auto slot = std::make_shared<gpu_slot>(ro);
    auto facts = slot->facts();
    if (!facts) return error{"GPU " + std::to_string(g) + ": " + facts.err().message};
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
  const std::string nvcc = "nvcc " + evaluator_->tools().release;
  if (slots_.empty()) return "compile-only (" + compile_only_reason_ + "), " + nvcc;
  return std::to_string(slots_.size()) + " GPU(s) (" + facts_->name + ", " + facts_->arch() +
         "), " + std::to_string(options_.runners_per_gpu) + " runner(s) each, " + nvcc + "; candidate children: " +
         describe_candidate_confinement(options_.run.confine);
}

}  // namespace kforge::sandbox

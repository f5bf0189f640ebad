#include "stages/sandbox_stage.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/hash.hpp"
#include "common/log.hpp"
#include "stages/verdict_reuse.hpp"
#include "sandbox/pool.hpp"
#include "tasks/prompt.hpp"
#include "tasks/task_wire.hpp"

namespace kforge::pipeline {

namespace {

class nvcc_sandbox final : public actors::sandbox_logic {
 public:
  nvcc_sandbox(std::unique_ptr<sandbox::sandbox_pool> pool, std::uint64_t seed)
      : pool_(std::move(pool)), seed_(seed) {}

  result<wire::VerdictT> evaluate(const wire::Candidate& c, const actors::envelope_info&) override {
    wire::VerdictT v;
    v.candidate.reset(c.UnPack());
    if (!c.task()) {
      v.status = wire::VerdictStatus::infra_error;
      v.reason = "candidate without a task";
      return v;
    }
    // The object API writes an empty string as no string at all: an empty answer (the policy
    // stopped at once) arrives without a source. It is the policy's answer, scored 0 like any
    // other without a kernel, not the sandbox's fault (infra_error is never scored).
    if (!c.source() || c.source()->size() == 0) {
      v.status = wire::VerdictStatus::rejected;
      v.reason = "no kernel to judge: the answer is empty";
      return v;
    }
    std::unique_ptr<wire::TaskT> wt(c.task()->UnPack());
    auto t = tasks::from_wire(*wt);
    if (!t) {
      v.status = wire::VerdictStatus::infra_error;
      v.reason = "the candidate's task is malformed: " + t.message();
      return v;
    }
    // candidate_source (stages/engine_sampler.hpp) hands over the whole completion when it
    // finds no usable fenced block. Where that answer opened a fence, most often it was cut off at
    // max_new_tokens inside its block: the verdict says so, instead of what nvcc makes of the
    // prose before the code (e.g. "line 1: identifier "The" is undefined"). Decided from
    // the source alone, so that verdict_reuse's key (the source) decides the same way.
    if (auto why = tasks::fenced_answer_problem(c.source()->string_view())) {
      v.status = wire::VerdictStatus::rejected;
      v.reason = "no kernel to judge: " + *why;
      return v;
    }
    // Every member of a GRPO group is checked on the same input sets (one reference run per
    // group), and no two groups share them.
    const std::uint64_t parts[2] = {seed_, c.group_id()};
    auto verdict = pool_->evaluate(*t, std::string_view(c.source()->c_str(), c.source()->size()),
                                  fnv1a64(parts, sizeof parts));
    verdict.candidate = std::move(v.candidate);
    {
      std::lock_guard lock(mu_);
      compile_ms_ += verdict.compile_ms;
    }
    return verdict;
  }

  /// nvcc time (compile_us; a cache hit adds ~0) and the runners' phases (sandbox/runner.hpp,
  /// run_phases: gpu_wait_us is the wait for the GPU, shared for verifying and exclusive for
  /// timing, so a sampler or trainer holding it shows there), in microseconds, since the last call.
  std::vector<std::pair<std::string, std::uint64_t>> take_counters() override {
    // Read under mu_: worker threads sharing this logic then take strictly later readings, so
    // no stretch is reported twice (phases() takes only the runners' leaf locks).
    std::lock_guard lock(mu_);
    const auto now = pool_->phases();
    const auto d = now - reported_;
    reported_ = now;
    const auto us = [](double ms) { return static_cast<std::uint64_t>(ms > 0 ? ms * 1000 : 0); };
    std::vector<std::pair<std::string, std::uint64_t>> out;
    out.emplace_back("compile_us", us(compile_ms_));
    compile_ms_ = 0;
    for (const auto& [name, f] : sandbox::run_phases::fields()) {
      std::string key(name);
      out.emplace_back(key.substr(0, key.size() - 3) + "_us", us(d.*f));  // "gpu_wait_ms" -> "gpu_wait_us"
    }
    for (const auto& [name, c] : sandbox::run_phases::counts())
      out.emplace_back(name, static_cast<std::uint64_t>(std::max(d.*c, 0)));
    return out;
  }

 private:
  std::unique_ptr<sandbox::sandbox_pool> pool_;
  std::uint64_t seed_;
  std::mutex mu_;
  double compile_ms_ = 0;           ///< since the last take_counters
  sandbox::run_phases reported_;    ///< the pool's phases at the last take_counters
};

}  // namespace

result<std::shared_ptr<actors::sandbox_logic>> shared_nvcc_sandbox(const manifest& m) {
  static std::mutex mutex;
  static std::weak_ptr<actors::sandbox_logic> shared;
  std::lock_guard lock(mutex);
  if (auto s = shared.lock()) return s;

  sandbox::pool_options po;
  const auto& so = m.sandbox;
  po.eval.compile.arch = so.arch;  // "auto": the pool resolves it from its first GPU's facts
  po.eval.compile.cache_dir =
      so.cache_dir.empty() ? m.run.run_dir + "/compile-cache" : so.cache_dir;
  po.eval.compile.time_limit = std::chrono::milliseconds(static_cast<long>(so.timeout_s * 1000));
  std::error_code ec;
  std::filesystem::create_directories(po.eval.compile.cache_dir, ec);
  po.work_dir = po.eval.compile.cache_dir;
  auto gpus = stage_gpus(m, actor_kind::sandbox_worker);
  if (!gpus) return error{"sandbox: " + gpus.message()};
  po.gpus = *gpus;
  po.compile_only = po.gpus.empty();
  po.runners_per_gpu = so.runners_per_gpu;
  po.reference_servers = so.reference_servers;
  po.run.time_limit = std::chrono::milliseconds(static_cast<long>(so.timeout_s * 1000));
  po.run.trials_per_round = (so.trials + po.run.rounds - 1) / po.run.rounds;
  po.run.slow_cutoff = so.slow_cutoff;
  po.run.confine = so.confine;
  po.run.confirm_speedup = so.confirm_speedup;
  po.run.profile = sandbox_profiles_wanted(so.profile, m.agent.max_turns, m.agent.feedback);
  po.run.profile_time_limit = std::chrono::milliseconds(static_cast<long>(so.profile_time_limit_s * 1000));
  po.run.ncu = so.ncu;
  auto pool = sandbox::sandbox_pool::create(po);
  if (!pool) return error{"sandbox: " + pool.message()};
  kforge::log::info("sandbox: " + (*pool)->describe());
  // A worker lives for the whole run: its children start now, together, not one by one under
  // the first groups.
  if (auto st = (*pool)->start_all(); !st) return error{"sandbox: " + st.err().message};
  // Repeated kernels judged once (stages/verdict_reuse.hpp).
  std::shared_ptr<actors::sandbox_logic> s =
      std::make_shared<nvcc_sandbox>(std::move(*pool), static_cast<std::uint64_t>(m.run.seed));
  if (so.reuse_verdicts != verdict_reuse_scope::off)
    s = std::make_shared<verdict_reuse>(std::move(s), so.reuse_verdicts);
  shared = s;
  return s;
}

}  // namespace kforge::pipeline

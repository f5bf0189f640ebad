#include "pipeline/sandbox_stage.hpp"

#include <filesystem>
#include <mutex>

#include "common/hash.hpp"
#include "sandbox/pool.hpp"
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
    if (!c.task() || !c.source()) {
      v.status = wire::VerdictStatus::infra_error;
      v.reason = "candidate without a task or a source";
      return v;
    }
    std::unique_ptr<wire::TaskT> wt(c.task()->UnPack());
    auto t = tasks::from_wire(*wt);
    if (!t) {
      v.status = wire::VerdictStatus::infra_error;
      v.reason = "the candidate's task is malformed: " + t.message();
      return v;
    }
    // Every member of a GRPO group is checked on the same input sets (one reference run per
    // group), and no two groups share them.
    const std::uint64_t parts[2] = {seed_, c.group_id()};
    auto verdict = pool_->evaluate(*t, std::string_view(c.source()->c_str(), c.source()->size()),
                                  fnv1a64(parts, sizeof parts));
    verdict.candidate = std::move(v.candidate);
    return verdict;
  }

 private:
  std::unique_ptr<sandbox::sandbox_pool> pool_;
  std::uint64_t seed_;
};

}  // namespace

result<std::shared_ptr<actors::sandbox_logic>> shared_nvcc_sandbox(const manifest& m) {
  static std::mutex mutex;
  static std::weak_ptr<actors::sandbox_logic> shared;
  std::lock_guard lock(mutex);
  if (auto s = shared.lock()) return s;

  sandbox::pool_options po;
  const auto& so = m.sandbox;
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
  auto pool = sandbox::sandbox_pool::create(po);
  if (!pool) return error{"sandbox: " + pool.message()};
  // A worker lives for the whole run: its children start now, together, not one by one under
  // the first groups.
  if (auto st = (*pool)->start_all(); !st) return error{"sandbox: " + st.err().message};
  std::shared_ptr<actors::sandbox_logic> s =
      std::make_shared<nvcc_sandbox>(std::move(*pool), static_cast<std::uint64_t>(m.run.seed));
  shared = s;
  return s;
}

}  // namespace kforge::pipeline

#include "pipeline/stage_factory.hpp"

#include "pipeline/sandbox_stage.hpp"
#include "pipeline/stage_logic.hpp"
#include "pipeline/stand_ins.hpp"

namespace kforge::pipeline {

namespace {

stand_in_options stand_ins(const manifest& m) {
  stand_in_options o;
  o.seed = static_cast<std::uint64_t>(m.run.seed);
  o.group_size = static_cast<std::uint32_t>(m.sampler.group_size);
  o.requests_per_step = static_cast<std::uint32_t>(m.buffer.groups_per_batch);
  o.sandbox_delay = std::chrono::milliseconds(m.sandbox.stand_in_ms);
  return o;
}

}  // namespace

std::shared_ptr<actors::task_source> make_task_source(const manifest& m) {
  return make_stand_in_tasks(stand_ins(m));
}
std::shared_ptr<actors::sampler_logic> make_sampler_logic(const manifest& m) {
  return make_stand_in_sampler(stand_ins(m));
}
result<std::shared_ptr<actors::sandbox_logic>> make_sandbox_logic(const manifest& m) {
  if (m.sandbox.backend == sandbox_backend::nvcc) return shared_nvcc_sandbox(m);
  return make_stand_in_sandbox(stand_ins(m));
}
std::shared_ptr<actors::reward_logic> make_reward_logic(const manifest& m) {
  return std::make_shared<reward_stage>(m.reward);
}
std::shared_ptr<actors::buffer_logic> make_buffer_logic(const manifest& m) {
  return std::make_shared<buffer_stage>(m.buffer);
}
std::shared_ptr<actors::trainer_logic> make_trainer_logic(const manifest& m) {
  return make_stand_in_trainer(stand_ins(m));
}

bool is_stand_in(actor_kind k, const manifest* m) noexcept {
  switch (k) {
    case actor_kind::sandbox_worker:
      return !m || m->sandbox.backend == sandbox_backend::stand_in;
    case actor_kind::reward:
    case actor_kind::buffer:
    case actor_kind::sandbox_pool:
      return false;
    default:
      return true;
  }
}

std::string logic_description(actor_kind k, const manifest* m) {
  switch (k) {
    case actor_kind::task_generator:
      return "stand-in: synthetic elementwise tasks (task library not built yet, issue 4)";
    case actor_kind::sampler:
      return "stand-in: synthetic candidates (policy model not built yet, issue 5)";
    case actor_kind::sandbox_pool:
      return "real: load-balancing broker with heartbeats and re-queue";
    case actor_kind::sandbox_worker:
      if (m && m->sandbox.backend == sandbox_backend::nvcc)
        return sandbox_gpus(*m).empty()
                   ? "real: static checks + nvcc, COMPILE-ONLY (no GPU in the group): verdict "
                     "`compiled` at best"
                   : "real: static checks, nvcc, verification and timing on GPU(s)";
      return "stand-in: synthetic verdicts, nothing compiled or run (sandbox.backend = "
             "\"stand-in\"; \"nvcc\" runs the real sandbox)";
    case actor_kind::reward:
      return "real: correctness + speedup reward with the two-level baseline";
    case actor_kind::buffer:
      return "real: dedup, staleness bound, whole GRPO groups";
    case actor_kind::trainer:
      return "stand-in: publishes version+1 per batch, trains nothing (GRPO not built yet, issue 6)";
  }
  return "unknown";
}

}  // namespace kforge::pipeline

#include "pipeline/stage_factory.hpp"

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
std::shared_ptr<actors::sandbox_logic> make_sandbox_logic(const manifest& m) {
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

bool is_stand_in(actor_kind k) noexcept {
  switch (k) {
    case actor_kind::reward:
    case actor_kind::buffer:
    case actor_kind::sandbox_pool:
      return false;
    default:
      return true;
  }
}

std::string logic_description(actor_kind k) {
  switch (k) {
    case actor_kind::task_generator:
      return "stand-in: synthetic elementwise tasks (task library not built yet, issue 4)";
    case actor_kind::sampler:
      return "stand-in: synthetic candidates (policy model not built yet, issue 5)";
    case actor_kind::sandbox_pool:
      return "real: load-balancing broker with heartbeats and re-queue";
    case actor_kind::sandbox_worker:
      return "stand-in: synthetic verdicts, nothing compiled or run (sandbox not built yet, issue 3)";
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

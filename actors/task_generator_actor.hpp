#pragma once
// The task generator stage: a trainer step in, that step's generation requests out, spread round
// robin over the samplers. Each request starts a new sample: its sample id is fresh (derived from
// the generator's name and a counter) and every later message about it carries that id. The scores
// fed back update the curriculum and count the groups judged whole, which the head compares with
// the groups requested (`sent`) to tell a loop that ran dry from one still at work.

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/interfaces.hpp"
#include "actors/stage_core.hpp"
#include "actors/logic_interfaces.hpp"

namespace kforge::actors {

struct task_generator_state : stage_base<std::uint64_t> {
  static inline const char* name = "kforge.task_generator";
  std::shared_ptr<task_source> logic;
  std::vector<request_sink> samplers;
  std::size_t next_sampler = 0;  ///< round-robin position
  /// Scores seen per group not yet whole; a whole group counts as `groups_judged`.
  std::unordered_map<std::uint64_t, std::uint32_t> arrived;
};

task_generator_actor::behavior_type task_generator_stage(
    task_generator_actor::stateful_pointer<task_generator_state> self, std::string name,
    std::shared_ptr<task_source> logic, std::vector<request_sink> samplers);

/// Spawns a task generator named `name` feeding `samplers` (round robin; with none, requests are
/// counted as dropped). An error when `logic` is null.
result<task_generator_actor> spawn_task_generator(caf::actor_system& sys, std::string name,
                                                  std::shared_ptr<task_source> logic,
                                                  std::vector<request_sink> samplers,
                                                  spawn_mode mode = spawn_mode::pooled);

}  // namespace kforge::actors

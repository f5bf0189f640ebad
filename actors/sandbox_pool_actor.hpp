#pragma once
// The sandbox pool stage: a candidate in, its verdict out. The verdict envelope keeps the
// candidate's sample id and policy version, so the reward and buffer know which policy wrote it.

#include <memory>
#include <string>

#include "actors/interfaces.hpp"
#include "actors/stage_core.hpp"
#include "actors/logic_interfaces.hpp"

namespace kforge::actors {

struct sandbox_pool_state : stage_base<candidate_msg> {
  static inline const char* name = "kforge.sandbox_pool";
  std::shared_ptr<sandbox_logic> logic;
  verdict_sink downstream;
};

sandbox_pool_actor::behavior_type sandbox_pool_stage(
    sandbox_pool_actor::stateful_pointer<sandbox_pool_state> self, std::string name,
    std::shared_ptr<sandbox_logic> logic, verdict_sink downstream);

/// Spawns a sandbox pool named `name`. The logic blocks for a compile, so a real pool wants
/// spawn_mode::detached. An error when `logic` is null.
result<sandbox_pool_actor> spawn_sandbox_pool(caf::actor_system& sys, std::string name,
                                              std::shared_ptr<sandbox_logic> logic,
                                              verdict_sink downstream,
                                              spawn_mode mode = spawn_mode::pooled);

}  // namespace kforge::actors

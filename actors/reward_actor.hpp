#pragma once
// The reward stage: a verdict in, a scored sample out, or a counted drop (an infra_error verdict is
// never a reward). Sample id and policy version pass through unchanged. The same scored envelope
// may also go to a feedback sink (the task generator's curriculum); it is counted apart, so `sent`
// still matches what the buffer receives.

#include <memory>
#include <string>

#include "actors/interfaces.hpp"
#include "actors/stage_core.hpp"
#include "actors/logic_interfaces.hpp"

namespace kforge::actors {

struct reward_state : stage_base<verdict_msg> {
  static inline const char* name = "kforge.reward";
  std::shared_ptr<reward_logic> logic;
  scored_sink downstream;
  scored_sink feedback;  ///< may be null: no feedback
  scored_sink observations;  ///< may be null: no episode goes on (single shot)
  bool draining = false;     ///< the run drains: episodes end where they are
};

reward_actor::behavior_type reward_stage(reward_actor::stateful_pointer<reward_state> self,
                                         std::string name, std::shared_ptr<reward_logic> logic,
                                         scored_sink downstream, scored_sink feedback,
                                         scored_sink observations);

/// Spawns a reward stage named `name` sending to `downstream` and, when not null, a copy of each
/// scored sample to `feedback`; a turn whose episode goes on goes to `observations` instead of
/// both. An error when `logic` is null.
result<reward_actor> spawn_reward(caf::actor_system& sys, std::string name,
                                  std::shared_ptr<reward_logic> logic, scored_sink downstream,
                                  scored_sink feedback = {}, scored_sink observations = {},
                                  spawn_mode mode = spawn_mode::pooled);

}  // namespace kforge::actors

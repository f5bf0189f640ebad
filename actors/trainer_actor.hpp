#pragma once
// The trainer stage: a train batch in, new policy weights out to every subscriber (samplers, the
// buffer, a bridge publishing them). Subscribers are added by message rather than at spawn because
// the pipeline is a cycle: samplers need the trainer's weights, and the trainer is downstream of
// the samplers.

#include <memory>
#include <string>
#include <vector>

#include "actors/interfaces.hpp"
#include "actors/stage_core.hpp"
#include "actors/logic_interfaces.hpp"

namespace kforge::actors {

struct trainer_state : stage_base<train_batch_msg> {
  static inline const char* name = "kforge.trainer";
  std::shared_ptr<trainer_logic> logic;
  std::vector<weights_sink> subscribers;
  policy_weights_msg latest;  ///< the last weights published, for late subscribers
};

/// The behavior. Weights envelopes have sample id 0 and policy_version = the weights' version.
trainer_actor::behavior_type trainer_stage(trainer_actor::stateful_pointer<trainer_state> self,
                                           std::string name, std::shared_ptr<trainer_logic> logic,
                                           std::vector<weights_sink> subscribers);

/// Spawns a trainer named `name` publishing to `subscribers` (more can subscribe later). A
/// training step blocks, so a real trainer wants spawn_mode::detached. An error when `logic` is
/// null.
result<trainer_actor> spawn_trainer(caf::actor_system& sys, std::string name,
                                    std::shared_ptr<trainer_logic> logic,
                                    std::vector<weights_sink> subscribers = {},
                                    spawn_mode mode = spawn_mode::pooled);

}  // namespace kforge::actors

#pragma once
// The buffer stage: scored samples in, whole GRPO groups out as train batches, when the logic has
// them. It also takes the trainer's weights, only to learn the current policy version (staleness).

#include <cstdint>
#include <memory>
#include <string>

#include "actors/interfaces.hpp"
#include "actors/stage_core.hpp"
#include "actors/logic_interfaces.hpp"

namespace kforge::actors {

struct buffer_state : stage_base<scored_msg> {
  static inline const char* name = "kforge.buffer";
  std::shared_ptr<buffer_logic> logic;
  batch_sink downstream;
  std::uint64_t policy_version = 0;  ///< the newest version the trainer published
};

/// The behavior. Batch envelopes have sample id 0 (a batch holds many samples) and the current
/// policy version.
buffer_actor::behavior_type buffer_stage(buffer_actor::stateful_pointer<buffer_state> self,
                                         std::string name, std::shared_ptr<buffer_logic> logic,
                                         batch_sink downstream);

/// Spawns a buffer named `name`. An error when `logic` is null.
result<buffer_actor> spawn_buffer(caf::actor_system& sys, std::string name,
                                  std::shared_ptr<buffer_logic> logic, batch_sink downstream,
                                  spawn_mode mode = spawn_mode::pooled);

}  // namespace kforge::actors

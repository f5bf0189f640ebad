#pragma once
// The sampler stage: a generation request in, a GRPO group of candidates out, each tagged with the
// policy version the sampler held when it generated them. New weights take effect between batches
// of requests (an actor handles one message at a time), never in the middle of a group.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/interfaces.hpp"
#include "actors/stage_core.hpp"
#include "actors/logic_interfaces.hpp"

namespace kforge::actors {

struct sampler_state : stage_base<generate_request_msg> {
  static inline const char* name = "kforge.sampler";
  std::shared_ptr<sampler_logic> logic;
  candidate_sink downstream;
  std::uint64_t policy_version = 0;  ///< of the weights the logic holds
  std::vector<generate_request_msg> pending;  ///< requests waiting for the next flush
  std::vector<scored_msg> turns;              ///< observations whose next turn waits for it
  bool flush_sent = false;                    ///< a flush_atom is on its way to this actor
};

/// The behavior. Candidate i of the request with sample id s gets sample id
/// derive_sample_id(s, i), group_id s, group_index i and group_size = the number generated. The
/// next turn t after the observation of sample s gets sample id derive_sample_id(s, t) and keeps
/// its episode's group.
sampler_actor::behavior_type sampler_stage(sampler_actor::stateful_pointer<sampler_state> self,
                                           std::string name, std::shared_ptr<sampler_logic> logic,
                                           candidate_sink downstream,
                                           std::uint64_t policy_version);

/// Spawns a sampler named `name` (its envelopes' sender) holding weights `policy_version`.
/// An error when `logic` is null.
result<sampler_actor> spawn_sampler(caf::actor_system& sys, std::string name,
                                    std::shared_ptr<sampler_logic> logic,
                                    candidate_sink downstream, std::uint64_t policy_version = 0,
                                    spawn_mode mode = spawn_mode::pooled);

}  // namespace kforge::actors

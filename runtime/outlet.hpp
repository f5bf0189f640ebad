#pragma once
// The outbound bus bridge: a CAF actor that owns one sending socket (PUSH, or XPUB for weights) and
// puts every envelope it is sent on it. A stage's downstream handle is an outlet; the outlet handle
// converts to each sink type, so any stage can feed one. Spawned detached: the socket has exactly
// one owner thread, and a send that waits for room never stalls the actors sharing CAF's workers.

#include <chrono>
#include <memory>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/typed_actor.hpp>

#include "actors/interfaces.hpp"
#include "bus/channel.hpp"
#include "bus/pubsub.hpp"

namespace kforge::pipeline {

using outlet_actor = caf::typed_actor<
    caf::reacts_to<actors::generate_request_msg>, caf::reacts_to<actors::candidate_msg>,
    caf::reacts_to<actors::verdict_msg>, caf::reacts_to<actors::scored_msg>,
    caf::reacts_to<actors::train_batch_msg>, caf::reacts_to<actors::policy_weights_msg>,
    caf::replies_to<actors::metrics_atom>::with<actors::stage_metrics>>;

/// Where an outlet sends: a PUSH sender, or a publisher with the topic it publishes under.
struct outlet_socket {
  std::unique_ptr<bus::sender> push;
  std::unique_ptr<bus::publisher> pub;
  std::string topic;
};

/// Spawns an outlet named `name` (e.g. "out:candidates") owning `socket`. A send that finds no room
/// within `send_timeout` is counted as an error with the link named, never dropped silently.
outlet_actor spawn_outlet(caf::actor_system& sys, std::string name, outlet_socket socket,
                          std::chrono::milliseconds send_timeout);

}  // namespace kforge::pipeline

#pragma once
// Every type the actor layer puts into CAF messages, in one type-ID block, and the function that
// registers them with an actor system. Targets linking kforge::actors compile with
// CAF_ENABLE_TYPE_ID_CHECKS, so sending a type missing from this block fails to compile.

#include <caf/actor_system_config.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/replies_to.hpp>
#include <caf/type_id.hpp>
#include <caf/typed_actor.hpp>

#include "actors/actor_errc.hpp"
#include "actors/payload_msg.hpp"
#include "actors/stage_metrics.hpp"

namespace kforge::actors {

/// Anything that takes new policy weights: samplers, the buffer (staleness), a bus bridge that
/// publishes them. The trainer broadcasts to these; it learns them from (subscribe_atom, handle).
using weights_sink = caf::typed_actor<caf::reacts_to<policy_weights_msg>>;

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stage_metrics& x) {
  return f(caf::meta::type_name("stage_metrics"), x.stage, x.name, x.received, x.sent, x.dropped,
           x.errors, x.queue_depth, x.logic_calls, x.latency_p50_us, x.latency_p99_us,
           x.last_error, x.extra);
}

}  // namespace kforge::actors

CAF_BEGIN_TYPE_ID_BLOCK(kforge_actors, caf::first_custom_type_id)

  CAF_ADD_TYPE_ID(kforge_actors, (kforge::messages::envelope))
  CAF_ADD_TYPE_ID(kforge_actors, (kforge::actors::task_msg))
  CAF_ADD_TYPE_ID(kforge_actors, (kforge::actors::generate_request_msg))
  CAF_ADD_TYPE_ID(kforge_actors, (kforge::actors::candidate_msg))
  CAF_ADD_TYPE_ID(kforge_actors, (kforge::actors::verdict_msg))
  CAF_ADD_TYPE_ID(kforge_actors, (kforge::actors::scored_msg))
  CAF_ADD_TYPE_ID(kforge_actors, (kforge::actors::train_batch_msg))
  CAF_ADD_TYPE_ID(kforge_actors, (kforge::actors::policy_weights_msg))
  CAF_ADD_TYPE_ID(kforge_actors, (kforge::actors::control_msg))
  CAF_ADD_TYPE_ID(kforge_actors, (kforge::actors::stage_metrics))
  CAF_ADD_TYPE_ID(kforge_actors, (kforge::actors::weights_sink))

  /// Ask a stage for its stage_metrics.
  CAF_ADD_ATOM(kforge_actors, kforge::actors, metrics_atom, "metrics")
  /// Tell the task generator to emit the requests of a trainer step.
  CAF_ADD_ATOM(kforge_actors, kforge::actors, step_atom, "step")
  /// A sampler's note to itself: generate the requests collected so far as one batch.
  CAF_ADD_ATOM(kforge_actors, kforge::actors, flush_atom, "flush")

CAF_END_TYPE_ID_BLOCK(kforge_actors)

namespace kforge::actors {

/// Registers the block's types and the actor_errc category with `cfg`. Call it on every config an
/// actor system running kforge actors is built from (CAF 0.17 keeps types per system, not global).
void init_actor_types(caf::actor_system_config& cfg);

}  // namespace kforge::actors

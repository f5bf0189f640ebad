#pragma once
// The typed interfaces of the stage actors. Each stage forwards its outputs to a downstream handle
// (the pipeline is a flow, not request/reply), so a stage's downstream is typed as a narrow "sink":
// anything that reacts to that one message type — the next stage, or a bus bridge that puts the
// envelope on a socket. A stage actor handle converts to the sink of its input type.
//
// Every stage also takes:
// - a plain messages::envelope, the entry for bus bridges: the stage checks the payload type and
//   counts a wrong one as an error (received and errors both go up);
// - a control_msg: pause (inputs are held, in order), start/resume (held inputs run), shutdown
//   (the actor quits with exit_reason::user_shutdown); drain and checkpoint change nothing here;
// - metrics_atom, answered with its stage_metrics.
//
// The wired pipeline is a cycle of strong handles (trainer -> samplers -> ... -> trainer), so its
// actors never go away by themselves: stop it by sending every stage a shutdown control (or an exit
// message), or the actor system's destructor waits for them forever.

#include <cstdint>

#include "actors/actor_types.hpp"

namespace kforge::actors {

using request_sink = caf::typed_actor<caf::reacts_to<generate_request_msg>>;
using candidate_sink = caf::typed_actor<caf::reacts_to<candidate_msg>>;
using verdict_sink = caf::typed_actor<caf::reacts_to<verdict_msg>>;
using scored_sink = caf::typed_actor<caf::reacts_to<scored_msg>>;
using batch_sink = caf::typed_actor<caf::reacts_to<train_batch_msg>>;
// weights_sink is in actor_types.hpp: it travels in messages, so it needs a type ID.

/// What every stage answers besides its inputs (see above).
using stage_common = caf::typed_actor<caf::reacts_to<messages::envelope>,
                                      caf::reacts_to<control_msg>,
                                      caf::replies_to<metrics_atom>::with<stage_metrics>>;

/// (step_atom, step): emit the generation requests of trainer step `step` to the samplers, round
/// robin. task_msg: add a task to the pool. scored_msg: curriculum feedback from the reward (it
/// converts to a scored_sink). Tasks and feedback change state only, so they are taken even while
/// paused. Counts: received = steps + tasks + feedback, sent = requests, extra "feedback" = scored
/// samples taken (the reward's "feedback_sent" on the other end), errors include failed feedback.
using task_generator_actor =
    caf::typed_actor<caf::reacts_to<step_atom, std::uint64_t>, caf::reacts_to<task_msg>,
                     caf::reacts_to<scored_msg>>::extend_with<stage_common>;

/// generate_request_msg: G candidates, tagged with the policy version held. Requests are collected
/// and generated together (up to the logic's max_batch) when the sampler's own flush_atom, sent
/// behind the first of them, comes up: every request already in the mailbox joins that batch.
/// policy_weights_msg: switch weights (a version not newer than the one held is dropped).
/// scored_msg: the observation of a turn whose episode goes on (from the reward); its next turn is
/// generated with the requests of the same flush. Counts: received = requests, sent = candidates
/// (every turn's), dropped = requests that yielded no candidate + stale weights, extra
/// "observations" = observations taken (the reward's "observations_sent" on the other end).
using sampler_actor = request_sink::extend<caf::reacts_to<flush_atom>, caf::reacts_to<scored_msg>>::
    extend_with<weights_sink, stage_common>;

/// candidate_msg: one verdict. Counts: received = candidates, sent = verdicts.
using sandbox_pool_actor = candidate_sink::extend_with<stage_common>;

/// verdict_msg: one scored sample, or a drop. The scored sample also goes to the optional
/// feedback sink (the task generator's curriculum). Counts: received = verdicts, sent = scored
/// samples sent downstream (the buffer), extra "feedback_sent" = copies sent to feedback.
using reward_actor = verdict_sink::extend_with<stage_common>;

/// scored_msg: zero or more train batches. policy_weights_msg: the version for staleness.
/// Counts: received = scored samples, sent = batches, dropped = samples dropped by the logic,
/// queue_depth includes the samples the logic holds.
using buffer_actor = scored_sink::extend_with<weights_sink, stage_common>;

/// train_batch_msg: one training step, whose weights go to every subscriber (a broadcast counts
/// once in sent). (subscribe_atom, weights_sink): add a subscriber, which at once gets the latest
/// weights if there are any. Counts: received = batches, sent = weights published.
using trainer_actor =
    batch_sink::extend<caf::reacts_to<caf::subscribe_atom, weights_sink>>::extend_with<
        stage_common>;

/// How a stage actor is scheduled: `pooled` shares CAF's worker threads (logic that returns
/// quickly); `detached` gives it a thread of its own, for logic that blocks (nvcc, a forward pass,
/// a training step) and would otherwise stall the actors sharing its worker.
enum class spawn_mode { pooled, detached };

}  // namespace kforge::actors

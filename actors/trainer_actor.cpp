#include "actors/trainer_actor.hpp"

#include <algorithm>

#include <caf/actor_system.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/stage_handlers.hpp"

namespace kforge::actors {

namespace {

using self_ptr = trainer_actor::stateful_pointer<trainer_state>;

/// The logic's last checkpoint as the gauge "checkpoint_step", which the head waits on at the end.
void report_checkpoint(self_ptr self) {
  auto& st = self->state;
  if (const auto step = st.logic->checkpoint_step()) st.core.set_extra("checkpoint_step", *step);
}

/// A result the logic failed to write in its last call, counted as the stage's fatal error
/// (`context` says which call), which ends the run.
void count_write_failure(self_ptr self, const std::string& context) {
  auto& st = self->state;
  if (auto w = st.logic->take_write_failure(); !w) st.core.count_fatal(error{context + w.message()});
}

void checkpoint(self_ptr self) {
  auto& st = self->state;
  auto s = st.core.call([&] { return st.logic->checkpoint(); });
  if (!s.ok()) st.core.count_error(error{"checkpoint: " + s.message()});
  count_write_failure(self, "checkpoint: ");
  report_checkpoint(self);
}

void train(self_ptr self, const train_batch_msg& m) {
  auto& st = self->state;
  const auto info = envelope_info::of(m.header());
  const auto context = "batch of step " + std::to_string(m.payload().step()) + ": ";
  auto out = st.core.call([&] { return st.logic->train(m.payload(), info); });
  if (!out.ok()) st.core.count_error(error{context + out.message()});
  // Also after a step whose weights went out (by NCCL) though its log could not be written.
  count_write_failure(self, context);
  if (!out.ok()) return;
  auto h = st.core.next_header(0, out.value().version);
  st.latest = policy_weights_msg::pack(h, out.value());
  report_checkpoint(self);  // a periodic checkpoint may have come with the step
  if (st.subscribers.empty()) {
    st.core.count_dropped();
    return;
  }
  for (const auto& s : st.subscribers) self->send(s, st.latest);
  st.core.count_sent();
}

void subscribe(self_ptr self, const weights_sink& sink) {
  auto& st = self->state;
  const auto& subs = st.subscribers;
  if (!sink || std::find(subs.begin(), subs.end(), sink) != subs.end()) return;
  st.subscribers.push_back(sink);
  if (st.latest.valid()) self->send(sink, st.latest);
}

}  // namespace

trainer_actor::behavior_type trainer_stage(self_ptr self, std::string name,
                                           std::shared_ptr<trainer_logic> logic,
                                           std::vector<weights_sink> subscribers) {
  auto& st = self->state;
  st.core = stage_core{"trainer", std::move(name)};
  st.logic = std::move(logic);
  st.subscribers = std::move(subscribers);
  report_checkpoint(self);  // a resumed trainer starts at its checkpoint
  auto work = [self](const train_batch_msg& m) { train(self, m); };
  // `checkpoint` is the trainer's own command; every other one is handled as by every stage.
  auto on_control = [self, work](const control_msg& m) {
    if (m.valid() && m.payload().command() == wire::ControlCommand::checkpoint)
      checkpoint(self);
    else
      detail::control(self, m, work);
  };
  return {
      [=](train_batch_msg& m) { detail::accept(self, std::move(m), work); },
      [=](caf::subscribe_atom, const weights_sink& sink) { subscribe(self, sink); },
      [=](const messages::envelope& e) {
        if (detail::route<train_batch_msg>(
                e, [&](train_batch_msg m) { detail::accept(self, std::move(m), work); }))
          return;
        if (detail::route<control_msg>(e, [&](control_msg m) { on_control(m); })) return;
        detail::reject(self, e, "TrainBatch or Control");
      },
      [=](const control_msg& m) { on_control(m); },
      [=](metrics_atom) { return detail::metrics(self); },
  };
}

result<trainer_actor> spawn_trainer(caf::actor_system& sys, std::string name,
                                    std::shared_ptr<trainer_logic> logic,
                                    std::vector<weights_sink> subscribers, spawn_mode mode) {
  if (!logic) return error{"trainer \"" + name + "\": no trainer logic given"};
  if (mode == spawn_mode::detached)
    return sys.spawn<caf::detached>(trainer_stage, std::move(name), std::move(logic),
                                    std::move(subscribers));
  return sys.spawn(trainer_stage, std::move(name), std::move(logic), std::move(subscribers));
}

}  // namespace kforge::actors

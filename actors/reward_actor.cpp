#include "actors/reward_actor.hpp"

#include <caf/actor_system.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/stage_handlers.hpp"

namespace kforge::actors {

namespace {

using self_ptr = reward_actor::stateful_pointer<reward_state>;

void score(self_ptr self, const verdict_msg& m) {
  auto& st = self->state;
  const auto info = envelope_info::of(m.header());
  auto out = st.core.call([&] { return st.logic->score(m.payload(), info); });
  for (const auto& [name, n] : st.logic->take_counters()) st.core.count_extra(name, n);
  if (!out.ok()) {
    st.core.count_error(error{"sample " + std::to_string(info.sample_id) + ": " + out.message()});
    return;
  }
  if (!out.value().has_value()) {
    st.core.count_dropped();
    return;
  }
  auto h = st.core.next_header(info.sample_id, info.policy_version);
  auto& scored = *out.value();
  if (st.observations && !st.draining && st.logic->goes_on(scored)) {
    // A turn whose episode goes on: a sampler generates the next turn from it. Neither the buffer
    // nor the curriculum sees it; the episode's last turn reaches both.
    self->send(st.observations, scored_msg::pack(h, scored));
    st.core.count_extra("observations_sent");
    return;
  }
  // Its episode's last turn, or any turn once the run drains (no turn is left in flight then):
  // the episode's sample.
  st.logic->end_episode(scored);
  auto msg = scored_msg::pack(h, scored);
  if (st.feedback) {  // the same envelope (shared, not copied); counted apart from `sent`
    self->send(st.feedback, msg);
    st.core.count_extra("feedback_sent");
  }
  detail::forward(self, st.downstream, std::move(msg));
}

// A drain ends episodes where they are: a turn that would go on ends its episode instead.
template <class Work>
void control(self_ptr self, const control_msg& m, const Work& work) {
  if (m.valid() && m.payload().command() == wire::ControlCommand::drain) self->state.draining = true;
  detail::control(self, m, work);
}

}  // namespace

reward_actor::behavior_type reward_stage(self_ptr self, std::string name,
                                         std::shared_ptr<reward_logic> logic,
                                         scored_sink downstream, scored_sink feedback,
                                         scored_sink observations) {
  auto& st = self->state;
  st.core = stage_core{"reward", std::move(name)};
  st.logic = std::move(logic);
  st.downstream = std::move(downstream);
  st.feedback = std::move(feedback);
  st.observations = std::move(observations);
  auto work = [self](const verdict_msg& m) { score(self, m); };
  return {
      [=](verdict_msg& m) { detail::accept(self, std::move(m), work); },
      [=](const messages::envelope& e) {
        if (detail::route<verdict_msg>(
                e, [&](verdict_msg m) { detail::accept(self, std::move(m), work); }))
          return;
        if (detail::route<control_msg>(e, [&](control_msg m) { control(self, m, work); })) return;
        detail::reject(self, e, "Verdict or Control");
      },
      [=](const control_msg& m) { control(self, m, work); },
      [=](metrics_atom) { return detail::metrics(self); },
  };
}

result<reward_actor> spawn_reward(caf::actor_system& sys, std::string name,
                                  std::shared_ptr<reward_logic> logic, scored_sink downstream,
                                  scored_sink feedback, scored_sink observations, spawn_mode mode) {
  if (!logic) return error{"reward \"" + name + "\": no reward logic given"};
  if (mode == spawn_mode::detached)
    return sys.spawn<caf::detached>(reward_stage, std::move(name), std::move(logic),
                                    std::move(downstream), std::move(feedback), std::move(observations));
  return sys.spawn(reward_stage, std::move(name), std::move(logic), std::move(downstream),
                   std::move(feedback), std::move(observations));
}

}  // namespace kforge::actors

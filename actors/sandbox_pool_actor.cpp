#include "actors/sandbox_pool_actor.hpp"

#include <caf/actor_system.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/stage_handlers.hpp"

namespace kforge::actors {

namespace {

using self_ptr = sandbox_pool_actor::stateful_pointer<sandbox_pool_state>;

void evaluate(self_ptr self, const candidate_msg& m) {
  auto& st = self->state;
  const auto info = envelope_info::of(m.header());
  auto out = st.core.call([&] { return st.logic->evaluate(m.payload(), info); });
  for (const auto& [name, n] : st.logic->take_counters()) st.core.count_extra(name, n);
  if (!out.ok()) {
    st.core.count_error(error{"sample " + std::to_string(info.sample_id) + ": " + out.message()});
    return;
  }
  auto h = st.core.next_header(info.sample_id, info.policy_version);
  detail::forward(self, st.downstream, verdict_msg::pack(h, out.value()));
}

}  // namespace

sandbox_pool_actor::behavior_type sandbox_pool_stage(self_ptr self, std::string name,
                                                     std::shared_ptr<sandbox_logic> logic,
                                                     verdict_sink downstream) {
  auto& st = self->state;
  st.core = stage_core{"sandbox_pool", std::move(name)};
  st.logic = std::move(logic);
  st.downstream = std::move(downstream);
  auto work = [self](const candidate_msg& m) { evaluate(self, m); };
  return {
      [=](candidate_msg& m) { detail::accept(self, std::move(m), work); },
      [=](const messages::envelope& e) {
        if (detail::route<candidate_msg>(
                e, [&](candidate_msg m) { detail::accept(self, std::move(m), work); }))
          return;
        if (detail::route<control_msg>(e, [&](control_msg m) { detail::control(self, m, work); }))
          return;
        detail::reject(self, e, "Candidate or Control");
      },
      [=](const control_msg& m) { detail::control(self, m, work); },
      [=](metrics_atom) { return detail::metrics(self); },
  };
}

result<sandbox_pool_actor> spawn_sandbox_pool(caf::actor_system& sys, std::string name,
                                              std::shared_ptr<sandbox_logic> logic,
                                              verdict_sink downstream, spawn_mode mode) {
  if (!logic) return error{"sandbox pool \"" + name + "\": no sandbox logic given"};
  if (mode == spawn_mode::detached)
    return sys.spawn<caf::detached>(sandbox_pool_stage, std::move(name), std::move(logic),
                                    std::move(downstream));
  return sys.spawn(sandbox_pool_stage, std::move(name), std::move(logic), std::move(downstream));
}

}  // namespace kforge::actors

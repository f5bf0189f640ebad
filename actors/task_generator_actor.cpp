#include "actors/task_generator_actor.hpp"

#include <algorithm>

#include <caf/actor_system.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/stage_handlers.hpp"

namespace kforge::actors {

namespace {

using self_ptr = task_generator_actor::stateful_pointer<task_generator_state>;

void emit_step(self_ptr self, std::uint64_t step) {
  auto& st = self->state;
  auto out = st.core.call([&] { return st.logic->next(step); });
  if (!out.ok()) {
    st.core.count_error(error{"step " + std::to_string(step) + ": " + out.message()});
    return;
  }
  for (auto& request : out.value()) {
    auto h = st.core.next_header(st.core.new_sample_id(), 0);
    request_sink to;
    if (!st.samplers.empty()) to = st.samplers[st.next_sampler++ % st.samplers.size()];
    detail::forward(self, to, generate_request_msg::pack(h, request));
  }
}

void add_task(self_ptr self, const task_msg& m) {
  auto& st = self->state;
  st.core.count_received();
  if (!m.valid()) {
    st.core.count_error(error{"empty task message"});
    return;
  }
  const auto info = envelope_info::of(m.header());
  auto s = st.core.call([&] { return st.logic->add_task(m.payload(), info); });
  if (!s.ok()) st.core.count_error(s.err());
}

// A group is judged once the scores of all its candidates are back.
void count_judged(task_generator_state& st, const wire::Scored& s) {
  const auto* v = s.verdict();
  const auto* c = v ? v->candidate() : nullptr;
  if (!c) return;
  auto& n = st.arrived[c->group_id()];
  if (++n < std::max<std::uint32_t>(c->group_size(), 1)) return;
  st.arrived.erase(c->group_id());
  st.core.count_extra("groups_judged");
}

// Feedback only updates the source's state (the curriculum); nothing is sent on.
void observe(self_ptr self, const scored_msg& m) {
  auto& st = self->state;
  st.core.count_received();
  st.core.count_extra("feedback");
  if (!m.valid()) {
    st.core.count_error(error{"empty scored message"});
    return;
  }
  count_judged(st, m.payload());
  const auto info = envelope_info::of(m.header());
  auto s = st.core.call([&] { return st.logic->observe(m.payload(), info); });
  if (!s.ok()) st.core.count_error(s.err());
}

}  // namespace

task_generator_actor::behavior_type task_generator_stage(self_ptr self, std::string name,
                                                         std::shared_ptr<task_source> logic,
                                                         std::vector<request_sink> samplers) {
  auto& st = self->state;
  st.core = stage_core{"task_generator", std::move(name)};
  st.logic = std::move(logic);
  st.samplers = std::move(samplers);
  auto work = [self](std::uint64_t step) { emit_step(self, step); };
  return {
      [=](step_atom, std::uint64_t step) { detail::accept(self, step, work); },
      [=](const task_msg& m) { add_task(self, m); },
      [=](const scored_msg& m) { observe(self, m); },
      [=](const messages::envelope& e) {
        if (detail::route<task_msg>(e, [&](task_msg m) { add_task(self, m); })) return;
        if (detail::route<scored_msg>(e, [&](scored_msg m) { observe(self, m); })) return;
        if (detail::route<control_msg>(e, [&](control_msg m) { detail::control(self, m, work); }))
          return;
        detail::reject(self, e, "Task, Scored or Control");
      },
      [=](const control_msg& m) { detail::control(self, m, work); },
      [=](metrics_atom) { return detail::metrics(self); },
  };
}

result<task_generator_actor> spawn_task_generator(caf::actor_system& sys, std::string name,
                                                  std::shared_ptr<task_source> logic,
                                                  std::vector<request_sink> samplers,
                                                  spawn_mode mode) {
  if (!logic) return error{"task generator \"" + name + "\": no task source given"};
  if (mode == spawn_mode::detached)
    return sys.spawn<caf::detached>(task_generator_stage, std::move(name), std::move(logic),
                                    std::move(samplers));
  return sys.spawn(task_generator_stage, std::move(name), std::move(logic), std::move(samplers));
}

}  // namespace kforge::actors

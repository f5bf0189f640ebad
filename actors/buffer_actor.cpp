#include "actors/buffer_actor.hpp"

#include <caf/actor_system.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/stage_handlers.hpp"

namespace kforge::actors {

namespace {

using self_ptr = buffer_actor::stateful_pointer<buffer_state>;

/// `n` samples dropped, and the logic's reasons for them (its counters since the last call).
void count_drops(buffer_state& st, std::uint64_t n) {
  st.core.count_dropped(n);
  for (const auto& [name, k] : st.logic->take_counters()) st.core.count_extra(name, k);
}

void push(self_ptr self, const scored_msg& m) {
  auto& st = self->state;
  const auto info = envelope_info::of(m.header());
  auto out = st.core.call([&] { return st.logic->push(m.payload(), info); });
  if (!out.ok()) {
    st.core.count_error(error{"sample " + std::to_string(info.sample_id) + ": " + out.message()});
    return;
  }
  count_drops(st, out.value().dropped);
  for (auto& batch : out.value().batches) {
    auto h = st.core.next_header(0, st.policy_version);
    detail::forward(self, st.downstream, train_batch_msg::pack(h, batch));
  }
}

void set_version(self_ptr self, const policy_weights_msg& m) {
  auto& st = self->state;
  if (!m.valid()) {
    st.core.count_error(error{"empty policy weights message"});
    return;
  }
  const auto version = m.payload().version();
  if (version <= st.policy_version) return;  // an older broadcast: the buffer already knows better
  st.policy_version = version;
  count_drops(st, st.logic->set_policy_version(version));
}

}  // namespace

buffer_actor::behavior_type buffer_stage(self_ptr self, std::string name,
                                         std::shared_ptr<buffer_logic> logic,
                                         batch_sink downstream) {
  auto& st = self->state;
  st.core = stage_core{"buffer", std::move(name)};
  st.logic = std::move(logic);
  st.downstream = std::move(downstream);
  auto work = [self](const scored_msg& m) { push(self, m); };
  return {
      [=](scored_msg& m) { detail::accept(self, std::move(m), work); },
      [=](const policy_weights_msg& m) { set_version(self, m); },
      [=](const messages::envelope& e) {
        if (detail::route<scored_msg>(
                e, [&](scored_msg m) { detail::accept(self, std::move(m), work); }))
          return;
        if (detail::route<policy_weights_msg>(
                e, [&](policy_weights_msg m) { set_version(self, m); }))
          return;
        if (detail::route<control_msg>(e, [&](control_msg m) { detail::control(self, m, work); }))
          return;
        detail::reject(self, e, "Scored, PolicyWeights or Control");
      },
      [=](const control_msg& m) { detail::control(self, m, work); },
      [=](metrics_atom) {
        auto m = detail::metrics(self);
        m.queue_depth += self->state.logic->pending();
        return m;
      },
  };
}

result<buffer_actor> spawn_buffer(caf::actor_system& sys, std::string name,
                                  std::shared_ptr<buffer_logic> logic, batch_sink downstream,
                                  spawn_mode mode) {
  if (!logic) return error{"buffer \"" + name + "\": no buffer logic given"};
  if (mode == spawn_mode::detached)
    return sys.spawn<caf::detached>(buffer_stage, std::move(name), std::move(logic),
                                    std::move(downstream));
  return sys.spawn(buffer_stage, std::move(name), std::move(logic), std::move(downstream));
}

}  // namespace kforge::actors

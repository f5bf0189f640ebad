#include "runtime/outlet.hpp"

#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/stage_core.hpp"

namespace kforge::pipeline {

namespace {

struct outlet_state {
  static inline const char* name = "kforge.outlet";
  actors::stage_core core;
  outlet_socket socket;
  std::chrono::milliseconds timeout{0};

  void put(const messages::envelope& e) {
    core.count_received();
    auto s = core.call([&] {
      return socket.push ? socket.push->send(e, timeout) : socket.pub->publish(socket.topic, e, timeout);
    });
    if (s.ok())
      core.count_sent();
    else
      core.count_error(s.err());
  }
};

outlet_actor::behavior_type outlet(outlet_actor::stateful_pointer<outlet_state> self,
                                   std::string name, std::shared_ptr<outlet_socket> socket,
                                   std::chrono::milliseconds timeout) {
  auto& st = self->state;
  st.core = actors::stage_core{"outlet", std::move(name)};
  st.socket = std::move(*socket);
  st.timeout = timeout;
  return {
      [=](const actors::generate_request_msg& m) { self->state.put(m.envelope()); },
      [=](const actors::candidate_msg& m) { self->state.put(m.envelope()); },
      [=](const actors::verdict_msg& m) { self->state.put(m.envelope()); },
      [=](const actors::scored_msg& m) { self->state.put(m.envelope()); },
      [=](const actors::train_batch_msg& m) { self->state.put(m.envelope()); },
      [=](const actors::policy_weights_msg& m) { self->state.put(m.envelope()); },
      [=](actors::metrics_atom) { return self->state.core.snapshot(self->mailbox().size()); },
  };
}

}  // namespace

outlet_actor spawn_outlet(caf::actor_system& sys, std::string name, outlet_socket socket,
                          std::chrono::milliseconds send_timeout) {
  // CAF copies spawn arguments; a socket cannot be copied, so it travels in a shared_ptr.
  auto s = std::make_shared<outlet_socket>(std::move(socket));
  return sys.spawn<caf::detached>(outlet, std::move(name), std::move(s), send_timeout);
}

}  // namespace kforge::pipeline

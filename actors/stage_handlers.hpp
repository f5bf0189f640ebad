#pragma once
// Handler pieces every stage actor shares: counting and holding inputs, control commands, routing
// a bridge's envelope to the typed handler, forwarding downstream. Internal to actors/: included by
// the stage .cpp files only.

#include <cstdint>
#include <string>
#include <utility>

#include <caf/exit_reason.hpp>

#include "actors/interfaces.hpp"
#include "actors/stage_core.hpp"

namespace kforge::actors::detail {

template <class T>
bool is_present(const payload_msg<T>& m) noexcept {
  return m.valid();
}
inline bool is_present(std::uint64_t) noexcept { return true; }

/// Counts a work input, then runs `work` on it now, or holds it while the stage is paused.
template <class Self, class Input, class Work>
void accept(Self* self, Input in, const Work& work) {
  auto& st = self->state;
  st.core.count_received();
  if (!is_present(in)) {
    st.core.count_error(error{"empty message (default-constructed, no envelope)"});
    return;
  }
  if (st.paused) {
    st.held.push_back(std::move(in));
    return;
  }
  work(in);
}

template <class Self, class Work>
void control(Self* self, const control_msg& m, const Work& work) {
  auto& st = self->state;
  if (!m.valid()) {
    st.core.count_error(error{"empty control message"});
    return;
  }
  switch (m.payload().command()) {
    case wire::ControlCommand::pause:
      st.paused = true;
      return;
    case wire::ControlCommand::start:
    case wire::ControlCommand::resume:
      st.paused = false;
      // Work may pause again only through another message, so this runs the whole backlog.
      while (!st.held.empty()) {
        auto in = std::move(st.held.front());
        st.held.pop_front();
        work(in);
      }
      return;
    case wire::ControlCommand::shutdown:
      self->quit(caf::exit_reason::user_shutdown);
      return;
    case wire::ControlCommand::drain:       // inputs are handled as they arrive: nothing to drain
    case wire::ControlCommand::checkpoint:  // the trainer handles it before this
    case wire::ControlCommand::refill:      // the step driver's, outside the stages
      return;
  }
  st.core.count_error(error{"unknown control command " +
                            std::to_string(static_cast<int>(m.payload().command()))});
}

template <class Self>
stage_metrics metrics(Self* self) {
  auto& st = self->state;
  return st.core.snapshot(st.held.size() + self->mailbox().size());
}

/// If `e` holds Msg's payload, wraps it and passes it to `f`; false otherwise.
template <class Msg, class F>
bool route(const messages::envelope& e, F&& f) {
  if (!e.valid() || e.type() != Msg::payload_type) return false;
  auto m = Msg::make(e);
  if (!m.ok()) return false;
  f(std::move(m).value());
  return true;
}

/// A bridge sent an envelope this stage does not take: counted as received and as an error.
template <class Self>
void reject(Self* self, const messages::envelope& e, const char* accepted) {
  auto& st = self->state;
  st.core.count_received();
  st.core.count_error(error{"expected " + std::string(accepted) + ", got " +
                            (e.valid() ? std::string(messages::payload_name(e.type()))
                                       : std::string("an empty envelope"))});
}

/// Sends `msg` to `to` and counts it; with no downstream the output is counted as dropped.
template <class Self, class Handle, class Msg>
void forward(Self* self, const Handle& to, Msg&& msg) {
  if (!to) {
    self->state.core.count_dropped();
    return;
  }
  self->send(to, std::forward<Msg>(msg));
  self->state.core.count_sent();
}

}  // namespace kforge::actors::detail

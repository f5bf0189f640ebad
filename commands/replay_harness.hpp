#pragma once
// An actor system on CAF's deterministic test_coordinator, for `kforge replay`: nothing runs until
// run() is called, and then every actor runs on the caller's thread, in mailbox order. That is what
// makes a replay reproducible: a stage sees its inputs in exactly the order they are sent, with no
// worker threads or timing in between. (tests/actors/caf_fixture.hpp is the same set-up for tests.)

#include <memory>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/expected.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/actor_types.hpp"
#include "messages/envelope.hpp"

namespace kforge::pipeline {

class deterministic_system {
 public:
  deterministic_system()
      : sys_(init(cfg_)),
        sched_(dynamic_cast<caf::scheduler::test_coordinator&>(sys_.scheduler())) {}
  ~deterministic_system() { sched_.run(); }
  deterministic_system(const deterministic_system&) = delete;
  deterministic_system& operator=(const deterministic_system&) = delete;

  caf::actor_system& system() noexcept { return sys_; }
  /// Runs every actor until all mailboxes are empty.
  void run() { sched_.run(); }

  /// Asks `stage` for its metrics and runs until the answer is in; an error when it is gone.
  template <class Handle>
  caf::expected<actors::stage_metrics> metrics(const Handle& stage) {
    caf::scoped_actor self{sys_, true};
    auto pending = self->request(stage, caf::infinite, actors::metrics_atom_v);
    sched_.run();
    caf::expected<actors::stage_metrics> out{caf::sec::unexpected_response};
    pending.receive([&](const actors::stage_metrics& m) { out = m; },
                    [&](caf::error& e) { out = std::move(e); });
    return out;
  }

 private:
  static caf::actor_system_config& init(caf::actor_system_config& cfg) {
    actors::init_actor_types(cfg);
    cfg.set("scheduler.policy", caf::atom("testing"));
    cfg.set("logger.file-verbosity", caf::atom("quiet"));
    cfg.set("logger.console-verbosity", caf::atom("quiet"));
    return cfg;
  }

  caf::actor_system_config cfg_;  // before sys_: the system is built from it
  caf::actor_system sys_;
  caf::scheduler::test_coordinator& sched_;
};

/// The behavior of a collector (below). `out` is a spawn argument rather than a lambda capture:
/// CAF 0.17 binds a reference through a null pointer when a function actor has no arguments.
template <class Sink, class Msg>
typename Sink::behavior_type collector(typename Sink::pointer,
                                       std::shared_ptr<std::vector<messages::envelope>> out) {
  return {[out](const Msg& m) { out->push_back(m.envelope()); }};
}

/// A downstream sink (e.g. actors::scored_sink taking actors::scored_msg) that appends every
/// envelope it receives to `out`, in arrival order. Only safe on a deterministic_system, where it
/// runs on the thread that reads `out`.
template <class Sink, class Msg>
Sink spawn_collector(caf::actor_system& sys, std::shared_ptr<std::vector<messages::envelope>> out) {
  return sys.spawn(collector<Sink, Msg>, std::move(out));
}

}  // namespace kforge::pipeline

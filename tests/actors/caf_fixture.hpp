#pragma once
// An actor system on CAF's deterministic test_coordinator: nothing runs until the test calls
// sched.run(), and then every actor runs on the test's own thread. No sleeps, no real threads.

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/expected.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/actor_types.hpp"

namespace kforge::actors::testing {

struct caf_fixture {
  caf::actor_system_config cfg;
  caf::actor_system sys;
  caf::scoped_actor self;
  caf::scheduler::test_coordinator& sched;

  static caf::actor_system_config& init(caf::actor_system_config& cfg) {
    init_actor_types(cfg);
    cfg.set("scheduler.policy", caf::atom("testing"));
    cfg.set("logger.file-verbosity", caf::atom("quiet"));
    return cfg;
  }

  caf_fixture()
      : sys(init(cfg)),
        self(sys, true),
        sched(dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler())) {}

  ~caf_fixture() { sched.run(); }

  /// Asks `stage` for its metrics and runs the system until the answer is in. An error when the
  /// stage is gone.
  template <class Handle>
  caf::expected<stage_metrics> try_metrics(const Handle& stage) {
    auto pending = self->request(stage, caf::infinite, metrics_atom_v);
    sched.run();
    caf::expected<stage_metrics> out{caf::sec::unexpected_response};
    pending.receive([&](const stage_metrics& m) { out = m; },
                    [&](caf::error& e) { out = std::move(e); });
    return out;
  }
};

}  // namespace kforge::actors::testing

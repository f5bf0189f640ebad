#include "pipeline/sandbox_service.hpp"

#include <unistd.h>

#include <chrono>
#include <csignal>
#include <future>
#include <memory>
#include <vector>

#include "actors/actor_types.hpp"
#include "common/clock.hpp"
#include "messages/envelope.hpp"
#include "pipeline/manifest.hpp"
#include "pipeline/stage_factory.hpp"

namespace kforge::pipeline {

using namespace std::chrono_literals;

namespace {

void serve_items(bus::worker& w, const std::shared_ptr<actors::sandbox_logic>& logic,
                 worker_slot& slot, const std::atomic<bool>& stop) {
  while (!stop.load()) {
    auto item = w.next(100ms);
    if (!item) {
      std::lock_guard<std::mutex> g(slot.mu);
      slot.core.count_error(item.err());
      continue;
    }
    if (!item->has_value()) continue;
    const auto& work = (*item)->work;
    if (slot.recording) slot.recording->write(work, wall_time_ns());
    wire::VerdictT v;
    std::unique_lock<std::mutex> g(slot.mu);
    slot.core.count_received();
    slot.held = w.held();
    g.unlock();
    auto cand = actors::candidate_msg::make(work);
    if (!cand) {
      v.status = wire::VerdictStatus::infra_error;
      v.reason = "malformed work item: " + cand.message();
    } else {
      const auto info = actors::envelope_info::of(cand->header());
      // Timed on the helper thread, recorded under the slot's lock: a metrics reader may take a
      // snapshot of the core at any time meanwhile.
      std::int64_t took_ns = 0;
      auto pending = std::async(std::launch::async, [&] {
        const auto t0 = monotonic_ns();
        auto r = actors::stage_core::guarded([&] { return logic->evaluate(cand->payload(), info); });
        took_ns = monotonic_ns() - t0;
        return r;
      });
      while (pending.wait_for(100ms) != std::future_status::ready) (void)w.tick();
      auto r = pending.get();
      g.lock();
      slot.core.record_call(took_ns);  // busy_us: the worker's time inside the sandbox
      g.unlock();
      if (r) {
        v = std::move(*r);
      } else {
        v.candidate.reset(cand->payload().UnPack());
        v.status = wire::VerdictStatus::infra_error;
        v.reason = "sandbox logic failed: " + r.message();
      }
    }
    v.worker = slot.name;
    g.lock();
    const auto h = slot.core.next_header(work->sample_id(), work->policy_version());
    g.unlock();
    auto done = w.complete((*item)->id, messages::pack(h, v));
    g.lock();
    if (done.ok())
      slot.core.count_sent();
    else
      slot.core.count_error(done.err());
    slot.held = w.held();
  }
}

}  // namespace

void serve_sandbox_worker(const std::string& endpoint, const bus::worker_options& options,
                          const std::shared_ptr<actors::sandbox_logic>& logic, worker_slot& slot,
                          const std::atomic<bool>& stop) {
  auto w = bus::worker::connect(endpoint, options);
  if (!w) {
    std::lock_guard<std::mutex> g(slot.mu);
    slot.core.count_error(w.err());
    return;
  }
  serve_items(*w, logic, slot, stop);
  (void)w->leave();
}

namespace {
std::atomic<bool> stop_signal{false};
extern "C" void on_stop_signal(int) { stop_signal = true; }
}  // namespace

int sandbox_worker_command(const sandbox_worker_options& opt, std::ostream& out, std::ostream& err) {
  auto m = opt.manifest.empty() ? default_manifest() : load_manifest(opt.manifest);
  if (!m) {
    err << "kforge worker: " << m.message() << "\n";
    return 2;
  }
  if (opt.connect.empty() || opt.threads < 1) {
    err << "kforge worker --role sandbox: needs --connect ENDPOINT and --threads >= 1\n";
    return 2;
  }
  m->sandbox.backend = sandbox_backend::nvcc;
  auto logic = make_sandbox_logic(*m);
  if (!logic) {
    err << "kforge worker: " << logic.message() << "\n";
    return 2;
  }
  out << "kforge worker --role sandbox: " << logic_description(actor_kind::sandbox_worker, &*m)
      << "; " << opt.threads << " thread(s) serving " << opt.connect << "\n";
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);

  char host[256] = "host";
  ::gethostname(host, sizeof host - 1);
  const std::string prefix =
      opt.name.empty() ? std::string(host) + "-" + std::to_string(::getpid()) : opt.name;
  std::vector<std::unique_ptr<worker_slot>> slots;
  for (int i = 0; i < opt.threads; ++i) {
    auto slot = std::make_unique<worker_slot>();
    slot->name = prefix + "-" + std::to_string(i);
    slot->core = actors::stage_core{"sandbox_worker", slot->name};
    auto* s = slot.get();
    s->thread = std::thread([&opt, &logic, s] {
      bus::worker_options wo;
      wo.name = s->name;
      serve_sandbox_worker(opt.connect, wo, *logic, *s, stop_signal);
    });
    slots.push_back(std::move(slot));
  }
  for (auto& s : slots) s->thread.join();
  for (auto& s : slots) {
    std::lock_guard<std::mutex> g(s->mu);
    const auto snap = s->core.snapshot(0);
    out << s->name << ": " << snap.received << " received, " << snap.sent << " answered, "
        << snap.errors << " errors, " << snap.extra.at(actors::busy_counter) / 1000 << " ms busy"
        << (snap.last_error.empty() ? "" : " (last: " + snap.last_error + ")")
        << "\n";
  }
  return 0;
}

}  // namespace kforge::pipeline

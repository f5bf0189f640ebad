#include "runtime/sandbox_service.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <future>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "actors/actor_types.hpp"
#include "common/clock.hpp"
#include "messages/envelope.hpp"
#include "config/manifest.hpp"
#include "stages/stage_factory.hpp"

namespace kforge::pipeline {

using namespace std::chrono_literals;

namespace {

// One candidate being judged: its work item and the verdict coming on a helper thread.
struct judging {
  std::uint64_t id = 0;
  messages::envelope work;
  std::optional<actors::candidate_msg> cand;
  std::int64_t took_ns = 0;
  std::future<result<wire::VerdictT>> verdict;
};

// Up to `capacity` candidates at once, each evaluated on its own helper thread (a real verdict
// takes seconds, mostly nvcc: several compile side by side and share the pool's runners), the
// worker heartbeating meanwhile; verdicts go back as they finish. On stop, those in flight are
// finished and sent first.
void serve_items(bus::worker& w, const std::shared_ptr<actors::sandbox_logic>& logic,
                 worker_slot& slot, std::size_t capacity, const std::atomic<bool>& stop) {
  std::vector<std::unique_ptr<judging>> running;
  auto send = [&](judging& j, wire::VerdictT v) {
    v.worker = slot.name;
    std::unique_lock<std::mutex> g(slot.mu);
    const auto h = slot.core.next_header(j.work->sample_id(), j.work->policy_version());
    g.unlock();
    auto done = w.complete(j.id, messages::pack(h, v));
    g.lock();
    if (done.ok())
      slot.core.count_sent();
    else
      slot.core.count_error(done.err());
    slot.held = w.held();
  };
  auto finish_ready = [&](bool wait) {
    for (auto it = running.begin(); it != running.end();) {
      judging& j = **it;
      if (!wait && j.verdict.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
        ++it;
        continue;
      }
      auto r = j.verdict.get();
      {
        std::lock_guard<std::mutex> g(slot.mu);
        slot.core.record_call(j.took_ns);  // busy_us: the worker's time inside the sandbox
        for (const auto& [name, n] : logic->take_counters()) slot.core.count_extra(name, n);
      }
      wire::VerdictT v;
      if (r) {
        v = std::move(*r);
      } else {
        v.candidate.reset(j.cand->payload().UnPack());
        v.status = wire::VerdictStatus::infra_error;
        v.reason = "sandbox logic failed: " + r.message();
      }
      send(j, std::move(v));
      it = running.erase(it);
    }
  };
  while (!stop.load()) {
    finish_ready(false);
    if (running.size() >= capacity) {  // full: heartbeat while the candidates in flight run
      (void)w.tick();
      std::this_thread::sleep_for(20ms);
      continue;
    }
    auto item = w.next(running.empty() ? 100ms : 20ms);
    if (!item) {
      std::lock_guard<std::mutex> g(slot.mu);
      slot.core.count_error(item.err());
      continue;
    }
    if (!item->has_value()) continue;
    auto j = std::make_unique<judging>();
    j->id = (*item)->id;
    j->work = (*item)->work;
    if (slot.recording) {
      const auto written = slot.recording->write(j->work, wall_time_ns());
      if (slot.write_failures) slot.write_failures->note(written);
    }
    {
      std::lock_guard<std::mutex> g(slot.mu);
      slot.core.count_received();
      slot.held = w.held();
    }
    auto cand = actors::candidate_msg::make(j->work);
    if (!cand) {
      wire::VerdictT v;
      v.status = wire::VerdictStatus::infra_error;
      v.reason = "malformed work item: " + cand.message();
      send(*j, std::move(v));
      continue;
    }
    j->cand.emplace(std::move(*cand));
    judging* raw = j.get();  // stays put: running holds it until the verdict is sent
    raw->verdict = std::async(std::launch::async, [raw, &logic] {
      const auto info = actors::envelope_info::of(raw->cand->header());
      const auto t0 = monotonic_ns();
      auto r = actors::stage_core::guarded([&] { return logic->evaluate(raw->cand->payload(), info); });
      raw->took_ns = monotonic_ns() - t0;
      return r;
    });
    running.push_back(std::move(j));
  }
  finish_ready(true);
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
  serve_items(*w, logic, slot, std::max<std::uint32_t>(1, options.capacity), stop);
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

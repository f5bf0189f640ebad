#include "runtime/process_runtime.hpp"

#include <unistd.h>

#include <caf/actor_cast.hpp>
#include <caf/after.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <algorithm>
#include <filesystem>
#include <future>
#include <mutex>
#include <map>
#include <optional>
#include <thread>

#include "actors/actor_types.hpp"
#include "actors/buffer_actor.hpp"
#include "actors/reward_actor.hpp"
#include "actors/sampler_actor.hpp"
#include "actors/task_generator_actor.hpp"
#include "actors/trainer_actor.hpp"
#include "bus/broker.hpp"
#include "common/log.hpp"
#include "bus/worker.hpp"
#include "common/first_error.hpp"
#include "messages/recording.hpp"
#include "runtime/outlet.hpp"
#include "runtime/sandbox_service.hpp"
#include "stages/stage_factory.hpp"

namespace kforge::pipeline {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

status prepare_endpoint(const std::string& endpoint) {
  if (endpoint.rfind("ipc://", 0) != 0) return {};
  const fs::path p = endpoint.substr(6);
  std::error_code ec;
  if (p.has_parent_path()) fs::create_directories(p.parent_path(), ec);
  if (ec) return error{"cannot create the folder of " + endpoint + ": " + ec.message()};
  return {};
}

std::string recording_path(const std::string& run_dir, link l, const std::string& process) {
  return (fs::path(run_dir) / "recordings" / (std::string(to_string(l)) + "@" + process + ".kfrec"))
      .string();
}

namespace {

/// One socket the pump reads, and the local actors its envelopes go to.
struct inbound {
  link id = link::tasks;
  std::unique_ptr<bus::receiver> pull;
  std::unique_ptr<bus::subscriber> sub;
  std::vector<caf::actor> targets;
  bool round_robin = false;  ///< one target per envelope (work) rather than all (broadcast)
  std::size_t next = 0;
  std::optional<messages::recording_writer> recording;

  zmq::socket_ref handle() { return pull ? pull->handle() : sub->handle(); }
};

/// Sends the generation requests of step s once the trainer is close enough: sync mode waits for
/// the weights of step s - 1 (lookahead 1); async runs up to max_staleness steps ahead.
///
/// Each step's requests are one batch's groups, but the buffer drops groups (duplicates, stale,
/// too small), and a short batch never trains. So when the head sees the loop run dry short of
/// its steps (refill_policy, run_metrics.hpp) it sends `refill`: one step of requests more,
/// labelled past this leg's steps and not counted in `next`, so the regular steps keep their pace.
struct step_driver {
  actors::task_generator_actor generator;
  std::uint64_t steps = 0;
  std::uint64_t lookahead = 1;
  std::uint64_t next = 0;
  std::uint64_t version = 0;
  std::uint64_t refills = 0;
  bool draining = false;

  void advance() {
    while (next < steps && next < version + lookahead)
      caf::anon_send(generator, actors::step_atom_v, next++);
  }
  void refill() {
    if (!draining) caf::anon_send(generator, actors::step_atom_v, steps + refills++);
  }
};

bool hosts(const process_spec& p, actor_kind k) { return p.count(k) > 0; }

// Instance names are unique across the whole topology: they are the envelopes' sender and seed
// the sample and message ids. Singleton stages go by their kind; others carry their process.
std::string stage_name(actor_kind k, const std::string& process, int i, int count) {
  auto n = std::string(to_string(k));
  if (is_singleton(k)) return n;
  return n + "@" + process + (count > 1 ? "/" + std::to_string(i) : "");
}

}  // namespace

struct process_runtime::impl {
  manifest m;
  process_spec self;
  runtime_options o;
  std::atomic<bool> stop_requested{false};

  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::vector<std::pair<std::string, caf::actor>> stages;  ///< stage actors and outlets
  std::vector<caf::actor> control_targets;  ///< the stage actors (not outlets): control commands
  std::vector<inbound> inputs;
  std::unique_ptr<bus::sender> metrics_out;
  std::optional<bus::broker> broker;
  std::unique_ptr<bus::sender> failures_out;  ///< used only on the broker's thread
  std::optional<messages::recording_writer> candidates_recording;  ///< broker's thread only
  /// The first failed write or close of this process's recordings, from whichever thread: the
  /// pump ends the process with it, so a run cannot go on as if it were recorded.
  first_error write_failures;
  std::vector<std::unique_ptr<worker_slot>> workers;
  std::optional<step_driver> driver;
  /// report_metrics' asker (made on the pump's thread) and, per stage, its asks not yet answered.
  std::optional<caf::scoped_actor> metrics_ask;
  std::map<caf::actor_addr, unsigned> metrics_pending;
  /// Failure notices the broker's thread (its on_failed) sent on; read by the pump's thread.
  std::atomic<std::uint64_t> broker_failed_sent{0};
  /// The candidates each sampler of this process had sent at its latest report: what its sandbox
  /// pool must have received before the last count is taken.
  std::map<std::string, std::uint64_t> sampler_sent;
  /// This process's samplers, told of new weights the moment they arrive (weights_arrived).
  std::vector<std::shared_ptr<actors::sampler_logic>> weights_listeners;

  ~impl() { shutdown(); }

  // ---- set-up ---------------------------------------------------------------------------------

  status open_input(link l, bool bind, std::vector<std::string> topics = {}) {
    const auto& ep = m.endpoint(l);
    if (auto s = prepare_endpoint(ep); !s) return s;
    inbound in;
    in.id = l;
    const bus::attach_point at{bind ? bind_address(ep) : ep,
                               bind ? bus::link::bind : bus::link::connect};
    if (l == link::weights || l == link::control) {
      auto s = bus::subscriber::open(at, topics);
      if (!s) return error{"link " + std::string(to_string(l)) + ": " + s.message()};
      in.sub = std::make_unique<bus::subscriber>(std::move(*s));
    } else {
      auto r = bus::receiver::open(at);
      if (!r) return error{"link " + std::string(to_string(l)) + ": " + r.message()};
      in.pull = std::make_unique<bus::receiver>(std::move(*r));
    }
    in.round_robin = l == link::tasks || l == link::batches || l == link::observations;
    if (recorded(l)) {
      auto w = recorder(l, self.name);
      if (!w) return w.err();
      in.recording.emplace(std::move(*w));
    }
    inputs.push_back(std::move(in));
    return {};
  }

  bool recorded(link l) const {
    const auto& rec = m.record.links;
    return std::find(rec.begin(), rec.end(), l) != rec.end();
  }

  result<messages::recording_writer> recorder(link l, const std::string& who) const {
    return messages::recording_writer::create(recording_path(o.run_dir, l, who),
                                              std::string(to_string(l)), m.record.max_bytes);
  }

  inbound* input(link l) {
    for (auto& in : inputs)
      if (in.id == l) return &in;
    return nullptr;
  }

  result<outlet_actor> open_outlet(link l, bool bind) {
    const auto& ep = m.endpoint(l);
    if (auto s = prepare_endpoint(ep); !s) return s.err();
    const bus::attach_point at{bind ? bind_address(ep) : ep,
                               bind ? bus::link::bind : bus::link::connect};
    outlet_socket sock;
    if (l == link::weights) {
      auto p = bus::publisher::open(at);
      if (!p) return error{"link weights: " + p.message()};
      // Subscribers that join late miss weights (PUB/SUB's slow joiner), and a sync run waits for
      // them, so the trainer's process waits until every subscribing process is attached.
      std::uint64_t expected = 1;  // the head's own progress subscriber
      for (const auto& p2 : m.processes)
        if (hosts(p2, actor_kind::sampler) || hosts(p2, actor_kind::buffer) ||
            hosts(p2, actor_kind::task_generator) || p2.head)
          ++expected;
      auto ok = p->wait_for_subscriptions(expected, 60s);
      if (!ok || !*ok)
        return error{"link weights: " + std::to_string(expected) +
                     " subscribing processes did not attach within 60 s"};
      sock.pub = std::make_unique<bus::publisher>(std::move(*p));
      sock.topic = "weights";
    } else {
      auto s = bus::sender::open(at);
      if (!s) return error{"link " + std::string(to_string(l)) + ": " + s.message()};
      sock.push = std::make_unique<bus::sender>(std::move(*s));
    }
    const auto name = "out:" + std::string(to_string(l)) + "@" + self.name;
    auto h = spawn_outlet(*sys, name, std::move(sock), o.send_timeout);
    stages.emplace_back(name, caf::actor_cast<caf::actor>(h));
    return h;
  }

  template <class Handle>
  void add_stage(const std::string& name, const Handle& h) {
    stages.emplace_back(name, caf::actor_cast<caf::actor>(h));
    control_targets.push_back(caf::actor_cast<caf::actor>(h));
  }

  /// Inputs first: the trainer's process waits for weights subscribers, which may be us. The head
  /// process hears its own control link too, so its stages get commands as any other's do.
  status open_links(bool sampler, bool buffer, bool generator) {
    if (auto s = open_input(link::control, false, {""}); !s) return s;
    if (sampler || buffer || generator)
      if (auto s = open_input(link::weights, false, {"weights"}); !s) return s;
    if (sampler) {
      if (auto s = open_input(link::tasks, false); !s) return s;
      // Turns whose episode goes on, from the reward, for their next turn.
      if (m.uses(link::observations))
        if (auto s = open_input(link::observations, false); !s) return s;
    }
    if (hosts(self, actor_kind::reward))
      if (auto s = open_input(link::verdicts, true); !s) return s;
    if (buffer)
      if (auto s = open_input(link::scored, true); !s) return s;
    if (hosts(self, actor_kind::trainer))
      if (auto s = open_input(link::batches, false); !s) return s;
    if (generator)  // the curriculum's feedback: every scored sample, from the reward
      if (auto s = open_input(link::feedback, true); !s) return s;
    {
      auto s = bus::sender::connect(m.endpoint(link::metrics));
      if (!s) return error{"link metrics: " + s.message()};
      metrics_out = std::make_unique<bus::sender>(std::move(*s));
    }
    return {};
  }

  /// The task generator, its outlet and the step driver that paces it.
  status spawn_task_generator() {
    auto out = open_outlet(link::tasks, true);
    if (!out) return out.err();
    auto source = make_task_source(m, o.run_dir, o.resume.has_value());
    if (!source) return source.err();
    auto g = actors::spawn_task_generator(*sys, "task_generator", std::move(source).value(),
                                          {actors::request_sink(*out)});
    if (!g) return g.err();
    add_stage("task_generator", *g);
    input(link::feedback)->targets.push_back(caf::actor_cast<caf::actor>(*g));
    driver.emplace();
    driver->generator = *g;
    driver->steps = static_cast<std::uint64_t>(m.run.steps);
    driver->lookahead = step_lookahead(m);
    return {};
  }

  /// This process's samplers, on one candidates outlet.
  status spawn_samplers() {
    auto out = open_outlet(link::candidates, false);
    if (!out) return out.err();
    const int n = self.count(actor_kind::sampler);
    for (int i = 0; i < n; ++i) {
      const auto name = stage_name(actor_kind::sampler, self.name, i, n);
      auto logic = make_sampler_logic(m, self.name);
      if (!logic) return error{name + ": " + logic.message()};
      weights_listeners.push_back(*logic);
      auto s = actors::spawn_sampler(*sys, name, std::move(logic).value(),
                                     actors::candidate_sink(*out), 0, actors::spawn_mode::detached);
      if (!s) return s.err();
      add_stage(name, *s);
      input(link::tasks)->targets.push_back(caf::actor_cast<caf::actor>(*s));
      if (m.uses(link::observations)) input(link::observations)->targets.push_back(caf::actor_cast<caf::actor>(*s));
      input(link::weights)->targets.push_back(caf::actor_cast<caf::actor>(*s));
    }
    return {};
  }

  /// The reward, with its scored and feedback outlets.
  status spawn_reward() {
    auto out = open_outlet(link::scored, false);
    if (!out) return out.err();
    auto feedback = open_outlet(link::feedback, false);
    if (!feedback) return feedback.err();
    actors::scored_sink observations;  // null: single-shot, no episode goes on
    if (m.uses(link::observations)) {
      auto o = open_outlet(link::observations, true);  // samplers of any process connect
      if (!o) return o.err();
      observations = actors::scored_sink(*o);
    }
    auto logic = make_run_reward_logic(
        m, o.run_dir, o.resume ? std::optional<std::uint64_t>(o.resume->step) : std::nullopt);
    if (!logic) return logic.err();
    auto r = actors::spawn_reward(*sys, "reward", std::move(*logic), actors::scored_sink(*out),
                                  actors::scored_sink(*feedback), observations);
    if (!r) return r.err();
    add_stage("reward", *r);
    input(link::verdicts)->targets.push_back(caf::actor_cast<caf::actor>(*r));
    return {};
  }

  /// The buffer, on the batches outlet.
  status spawn_buffer() {
    auto out = open_outlet(link::batches, true);
    if (!out) return out.err();
    auto logic = make_run_buffer_logic(
        m, o.run_dir, o.resume ? std::optional<std::uint64_t>(o.resume->step) : std::nullopt);
    if (!logic) return logic.err();
    auto b = actors::spawn_buffer(*sys, "buffer", std::move(*logic), actors::batch_sink(*out));
    if (!b) return b.err();
    add_stage("buffer", *b);
    input(link::scored)->targets.push_back(caf::actor_cast<caf::actor>(*b));
    input(link::weights)->targets.push_back(caf::actor_cast<caf::actor>(*b));
    return {};
  }

  /// This process's trainers, on the weights outlet.
  status spawn_trainers() {
    auto out = open_outlet(link::weights, true);
    if (!out) return out.err();
    const int n = self.count(actor_kind::trainer);
    for (int i = 0; i < n; ++i) {
      const auto name = stage_name(actor_kind::trainer, self.name, i, n);
      auto logic = make_trainer_logic(m, o.run_dir, o.resume ? o.resume->checkpoint : "");
      if (!logic) return logic.err();
      auto t = actors::spawn_trainer(*sys, name, std::move(*logic),
                                     {actors::weights_sink(*out)}, actors::spawn_mode::detached);
      if (!t) return t.err();
      add_stage(name, *t);
      input(link::batches)->targets.push_back(caf::actor_cast<caf::actor>(*t));
    }
    return {};
  }

  status build() {
    for (const char* sub : {"recordings", "logs"}) fs::create_directories(fs::path(o.run_dir) / sub);
    actors::init_actor_types(cfg);
    cfg.set("logger.file-verbosity", caf::atom("quiet"));
    cfg.set("scheduler.max-threads", 2);
    sys = std::make_unique<caf::actor_system>(cfg);

    const bool sampler = hosts(self, actor_kind::sampler);
    const bool buffer = hosts(self, actor_kind::buffer);
    const bool generator = hosts(self, actor_kind::task_generator);

    if (auto s = open_links(sampler, buffer, generator); !s) return s;
    if (generator)
      if (auto s = spawn_task_generator(); !s) return s;
    if (sampler)
      if (auto s = spawn_samplers(); !s) return s;
    if (hosts(self, actor_kind::reward))
      if (auto s = spawn_reward(); !s) return s;
    if (buffer)
      if (auto s = spawn_buffer(); !s) return s;
    if (hosts(self, actor_kind::trainer))
      if (auto s = spawn_trainers(); !s) return s;
    if (hosts(self, actor_kind::sandbox_pool))
      if (auto s = start_broker(); !s) return s;
    for (int i = 0, n = self.count(actor_kind::sandbox_worker); i < n; ++i)
      if (auto s = start_worker(stage_name(actor_kind::sandbox_worker, self.name, i, n),
                                self.name + (n > 1 ? "-" + std::to_string(i) : ""));
          !s)
        return s;
    if (o.resume) resume_at(*o.resume);
    if (driver) driver->advance();
    return {};
  }

  /// The checkpoint's weights reach this process's samplers and buffer as if the trainer had just
  /// published them at version `step` (before any request, which comes later through the pump), and
  /// the step driver goes on from there.
  void resume_at(const resume_point& r) {
    if (driver) driver->next = driver->version = r.step;
    auto* in = input(link::weights);
    if (!in) return;
    wire::PolicyWeightsT w;
    w.version = r.step;
    w.transport = wire::WeightsTransport::file;
    std::error_code ec;
    // trainer/checkpoint.hpp's checkpoint_weights_file: the policy as save_weights writes it.
    const auto file = fs::path(r.checkpoint) / "model.safetensors";
    w.path = fs::absolute(file, ec).string();
    w.bytes = fs::file_size(file, ec);
    if (ec) w.bytes = 0;  // the sampler then says what is wrong with the file
    messages::header h;
    h.sender = "resume";
    h.policy_version = r.step;
    const auto e = messages::pack(h, w);
    // Recorded as received on the link, so a replay of the buffer starts where it started.
    if (in->recording) write_failures.note(in->recording->write(e, wall_time_ns()));
    for (const auto& t : in->targets) caf::anon_send(t, e);
  }

  status start_broker() {
    for (link l : {link::candidates, link::sandbox_workers})
      if (auto s = prepare_endpoint(m.endpoint(l)); !s) return s;
    auto f = bus::sender::connect(m.endpoint(link::verdicts));
    if (!f) return error{"link verdicts (failed items): " + f.message()};
    failures_out = std::make_unique<bus::sender>(std::move(*f));
    bus::broker_options bo;
    bo.frontend = {bind_address(m.endpoint(link::candidates)), bus::link::bind};
    bo.backend = {bind_address(m.endpoint(link::sandbox_workers)), bus::link::bind};
    bo.results = {m.endpoint(link::verdicts), bus::link::connect};
    bo.heartbeat_interval = o.heartbeat_interval;
    bo.liveness = o.liveness;
    bo.on_failed = [this](const bus::failed_item& item) { report_failed(item); };
    // A host that fails or comes back shows in the head's log with the time it was noticed and
    // what became of its work (docs/cluster.md: hosts that fail).
    bo.on_joined = [](const bus::worker_joined& j) {
      kforge::log::info("sandbox_pool: worker " + j.name + " joined (" +
                        std::to_string(j.credit) + " in flight at most, heartbeat " +
                        std::to_string(j.heartbeat_interval.count()) + " ms)");
    };
    bo.on_gone = [](const bus::worker_gone& g) {
      std::string line = "sandbox_pool: worker " + g.name + (g.died ? " lost (" : " left (") +
                         g.reason + ") after " + std::to_string(g.taken) + " items, " +
                         std::to_string(g.returned) + " judged; " + std::to_string(g.requeued) +
                         " re-queued, " + std::to_string(g.failed) + " failed";
      if (g.unjudged > 0) line += ", " + std::to_string(g.unjudged) + " left unjudged at the stop";
      if (g.died)
        kforge::log::warn(line);
      else
        kforge::log::info(line);
    };
    if (recorded(link::candidates)) {
      // The broker's thread is the only one touching this writer once the broker starts.
      auto w = recorder(link::candidates, self.name);
      if (!w) return w.err();
      candidates_recording.emplace(std::move(*w));
      bo.on_received = [this](const messages::envelope& e) {
        write_failures.note(candidates_recording->write(e, wall_time_ns()));
      };
    }
    auto b = bus::broker::create(std::move(bo));
    if (!b) return error{"sandbox_pool: " + b.message()};
    broker.emplace(std::move(*b));
    return broker->start();
  }

  // An item lost with two workers still gets a verdict — infra_error, the sandbox's fault — so its
  // GRPO group completes and the loss is visible downstream. Runs on the broker's thread.
  void report_failed(const bus::failed_item& item) {
    wire::VerdictT v;
    if (const auto* c = item.work.as<wire::Candidate>()) v.candidate.reset(c->UnPack());
    v.status = wire::VerdictStatus::infra_error;
    v.reason = "sandbox_pool: " + item.reason;
    v.worker = "sandbox_pool";
    messages::header h;
    h.message_id = item.work->message_id();
    h.sample_id = item.work->sample_id();
    h.sender = "sandbox_pool";
    h.policy_version = item.work->policy_version();
    if (failures_out->send(messages::pack(h, v), o.send_timeout).ok()) ++broker_failed_sent;
  }

  /// `file_tag` names its recording of the sandbox_workers link (one file per worker thread).
  status start_worker(const std::string& name, const std::string& file_tag) {
    auto slot = std::make_unique<worker_slot>();
    slot->name = name;
    if (recorded(link::sandbox_workers)) {
      auto w = recorder(link::sandbox_workers, file_tag);
      if (!w) return w.err();
      slot->recording.emplace(std::move(*w));
      slot->write_failures = &write_failures;
    }
    slot->core = actors::stage_core{"sandbox_worker", name};
    slot->core.set_extra(actors::starting_gauge, 1);  // until worker_loop has made its logic
    auto* s = slot.get();
    s->thread = std::thread([this, s] { worker_loop(*s); });
    workers.push_back(std::move(slot));
    return {};
  }

  void worker_loop(worker_slot& slot) {
    bus::worker_options wo;
    wo.name = slot.name;
    // sandbox.compile_jobs candidates in flight: they compile side by side and share the pool's
    // runners for verification and timing.
    wo.capacity = static_cast<std::uint32_t>(m.sandbox.compile_jobs);
    wo.heartbeat_interval = o.heartbeat_interval;
    wo.liveness = o.liveness;
    auto made = make_sandbox_logic(m);
    {
      std::lock_guard<std::mutex> g(slot.mu);
      slot.core.set_extra(actors::starting_gauge, 0);
    }
    if (!made) {
      // No silent fallback to the stand-in, and no wait for a stall: the run fails at once,
      // naming why (a sandbox that cannot start its children judges nothing).
      std::lock_guard<std::mutex> g(slot.mu);
      slot.core.count_fatal(made.err());
      return;
    }
    serve_sandbox_worker(m.endpoint(link::sandbox_workers), wo, *made, slot, stop_requested);
    if (slot.recording) write_failures.note(slot.recording->close());
  }

  // ---- the pump ---------------------------------------------------------------------------------

  void dispatch(inbound& in, const messages::envelope& e) {
    if (in.recording) write_failures.note(in.recording->write(e, wall_time_ns()));
    if (in.id == link::control) {
      const auto* c = e.as<wire::Control>();
      if (!c) return;
      switch (c->command()) {
        case wire::ControlCommand::shutdown:
          stop_requested = true;
          break;
        case wire::ControlCommand::checkpoint:  // the trainers act on it; other stages ignore it
          for (const auto& t : control_targets) caf::anon_send(t, e);
          break;
        case wire::ControlCommand::drain:
          // Settling means finishing the steps already released, not starting new ones: an
          // interrupted run stops at the step in flight, and its checkpoint is of that step.
          if (driver) {
            driver->steps = std::min(driver->steps, driver->next);
            driver->draining = true;
          }
          break;
        case wire::ControlCommand::refill:
          if (driver) driver->refill();
          break;
        default:  // heartbeats (start) and the rest: nothing for the stages
          break;
      }
      return;
    }
    if (in.id == link::weights)
      if (const auto* w = e.as<wire::PolicyWeights>())
        for (const auto& l : weights_listeners) l->weights_arrived(*w);
    if (in.round_robin && !in.targets.empty()) {
      caf::anon_send(in.targets[in.next++ % in.targets.size()], e);
    } else {
      for (const auto& t : in.targets) caf::anon_send(t, e);
    }
    // New weights reach this process's samplers (above) before the next step's requests are
    // released: those come back through this same pump, so a sync run's step s is sampled with
    // version s.
    if (in.id == link::weights && driver)
      if (const auto* w = e.as<wire::PolicyWeights>()) {
        driver->version = std::max(driver->version, w->version());
        driver->advance();
      }
  }

  void send_metric(wire::StageMetricsT w) {
    w.process = self.name;
    messages::header h;
    h.sender = self.name;
    (void)metrics_out->send(messages::pack(h, w), 100ms);
  }

  /// The stages' metrics, asked for without blocking the pump: each round first sends on the
  /// answers that came in since the last one, then asks every stage that has none outstanding. A
  /// stage inside a long logic call (a sampler generating, a trainer stepping) answers when it is
  /// free and keeps its last report meanwhile. (Asking each in turn and waiting up to 500 ms for
  /// each held the pump, and every link it serves, 500 ms a round per busy stage.) The last round,
  /// before the process ends, asks every stage afresh and waits for all the answers, up to
  /// final_counts_wait (a stage inside a logic call answers when it ends): a stage answers in
  /// order, so its last answer counts all it did (the head's balance checks).
  void report_metrics(bool last = false) {
    if (!metrics_ask) metrics_ask.emplace(*sys);
    auto& ask = *metrics_ask;
    auto take = [&](std::chrono::milliseconds wait) {
      bool got = false;
      ask->receive(
          [&](const actors::stage_metrics& s) {
            const auto it = metrics_pending.find(caf::actor_cast<caf::actor_addr>(ask->current_sender()));
            if (it != metrics_pending.end() && --it->second == 0) metrics_pending.erase(it);
            auto w = actors::to_wire(s);
            if (w.kind == "sampler") sampler_sent[w.stage] = w.sent;
            send_metric(std::move(w));
            got = true;
          },
          caf::after(wait) >> [] {});
      return got;
    };
    while (!metrics_pending.empty() && take(0ms)) {
    }
    for (const auto& [name, actor] : stages) {
      auto& n = metrics_pending[caf::actor_cast<caf::actor_addr>(actor)];
      if (n > 0 && !last) continue;
      ++n;
      ask->send(actor, actors::metrics_atom_v);
    }
    const auto deadline = std::chrono::steady_clock::now() + final_counts_wait(m.run);
    while (last && !metrics_pending.empty()) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left <= 0ms || !take(left)) break;
    }
    for (auto& w : workers) {
      std::lock_guard<std::mutex> g(w->mu);
      send_metric(actors::to_wire(w->core.snapshot(w->held)));
    }
    if (broker) {
      // The last count waits (up to 2 s) until the pool has received all that this process's
      // samplers said they sent: one whose generate call ended in the last round sent its
      // candidates just before its answer, and they are still on their way to the pool (a 240 s
      // GPU run ended unbalanced so: 1024 sent, 995 received). No fixed quiet time: candidates of
      // a sampler that answers after the round would be counted by the pool and not by it.
      // Samplers of other processes are not waited for (their counts are not known here).
      auto c = broker->counters();
      if (last) {
        std::uint64_t sent = 0;
        for (const auto& [stage, n] : sampler_sent) sent += n;
        c = broker->counters_once_received(sent, 2s);
      }
      wire::StageMetricsT w;
      w.stage = "sandbox_pool";
      w.kind = "sandbox_pool";
      w.received = c.received;
      const std::uint64_t failed_sent = broker_failed_sent;
      w.sent = c.completed + failed_sent;
      w.dropped = c.failed - std::min(c.failed, failed_sent);
      w.errors = c.rejected;
      w.queue_depth = c.queued + c.in_flight + c.pending_results;
      w.last_error = broker->last_error();
      auto add = [&](const char* n, std::uint64_t v) {
        auto x = std::make_unique<wire::CounterT>();
        x->name = n;
        x->value = v;
        w.extra.push_back(std::move(x));
      };
      add("queued", c.queued);
      add("in_flight", c.in_flight);
      add("completed", c.completed);
      add("failed", c.failed);
      add("requeued", c.requeued);
      add("dispatched", c.dispatched);
      add("stale_results", c.stale_results);
      add("workers_alive", c.workers_alive);
      add("workers_dead", c.workers_dead);
      add("workers_left", c.workers_left);
      send_metric(std::move(w));
    }
    std::uint64_t rejected = 0;
    for (auto& in : inputs)
      rejected += in.pull ? in.pull->counters().rejected : in.sub->counters().rejected;
    wire::StageMetricsT bus;
    bus.stage = "bus@" + self.name;
    bus.kind = "bus";
    bus.errors = rejected;  // received messages that were not valid envelopes
    for (auto& in : inputs)
      bus.received += in.pull ? in.pull->counters().received : in.sub->counters().received;
    send_metric(std::move(bus));
  }

  /// Takes what waits on the inputs (up to 256 envelopes a link per pass, so one busy link cannot
  /// starve the others), waiting up to `wait` for any. True when something arrived.
  bool pump(std::vector<zmq::pollitem_t>& items, std::chrono::milliseconds wait,
            std::chrono::steady_clock::time_point& last_control) {
    zmq::poll(items.data(), items.size(), wait);
    bool got = false;
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (!(items[i].revents & ZMQ_POLLIN)) continue;
      auto& in = inputs[i];
      for (int n = 0; n < 256; ++n) {
        if (in.sub) {
          auto r = in.sub->receive(0ms);
          if (!r.ok()) continue;  // counted by the subscriber as rejected
          if (!r->has_value()) break;
          if (in.id == link::control) last_control = std::chrono::steady_clock::now();
          dispatch(in, (*r)->env);
        } else {
          auto r = in.pull->receive(0ms);
          if (!r.ok()) continue;  // counted by the receiver as rejected
          if (!r->has_value()) break;
          dispatch(in, **r);
        }
        got = true;
      }
    }
    return got;
  }

  status run() {
    auto next_metrics = std::chrono::steady_clock::now();
    auto last_control = std::chrono::steady_clock::now();
    std::vector<zmq::pollitem_t> items;
    for (auto& in : inputs) items.push_back({in.handle().handle(), 0, ZMQ_POLLIN, 0});
    status result;
    while (!stop_requested.load()) {
      try {
        pump(items, 50ms, last_control);
      } catch (const zmq::error_t& e) {
        if (e.num() == EINTR) continue;
        result = error{std::string("bus poll failed: ") + e.what()};
        break;
      }
      const auto now = std::chrono::steady_clock::now();
      if (now >= next_metrics) {
        report_metrics();
        next_metrics = now + o.metrics_interval;
      }
      if (auto s = write_failures.get(); !s) {
        result = error{"process " + self.name + ": " + s.message()};
        break;
      }
      if (!self.head && now - last_control > o.orphan_timeout) {
        result = error{"process " + self.name + ": the head has been silent on the control link for " +
                       std::to_string(o.orphan_timeout.count()) + " ms; stopping"};
        break;
      }
    }
    settle(items, last_control);
    report_metrics(true);  // the final counts reach the head before this process goes
    return result;
  }

  /// Before the last counts: the sandbox pool freezes (bus::broker::freeze: what it holds, queued
  /// or in a worker's hands, is counted as left unjudged; candidates a sampler still sends are
  /// counted as received), then the links are pumped until nothing has arrived for 200 ms (at
  /// most 3 s), so what was in transit between stages (a verdict on its way to the reward, a
  /// scored sample to the buffer) is counted on both sides. Without it a run stopped while the
  /// pool was still judging could end unbalanced by one in-transit envelope (test_run's
  /// time-limited run did, now and then).
  void settle(std::vector<zmq::pollitem_t>& items, std::chrono::steady_clock::time_point& last_control) {
    if (broker) broker->freeze();
    const auto until = std::chrono::steady_clock::now() + 3s;
    try {
      while (std::chrono::steady_clock::now() < until && pump(items, 200ms, last_control)) {
      }
    } catch (const zmq::error_t&) {  // the end of the run either way; the counts say what arrived
    }
  }

  void shutdown() {
    stop_requested = true;
    for (auto& w : workers)
      if (w->thread.joinable()) w->thread.join();
    if (broker) broker->stop();
    if (candidates_recording) write_failures.note(candidates_recording->close());
    candidates_recording.reset();
    // A sampler waiting for an NCCL version that will never come (the trainer has stopped) stops
    // waiting now, so that the actor system below is not held up by it.
    for (const auto& l : weights_listeners) l->shutting_down();
    weights_listeners.clear();
    metrics_pending.clear();
    metrics_ask.reset();  // an actor too: the system below waits for it
    if (sys) {
      for (const auto& [name, actor] : stages) caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
      stages.clear();
      control_targets.clear();
      driver.reset();
      for (auto& in : inputs) in.targets.clear();
      sys.reset();  // waits for every actor; outlets close their sockets as they go
    }
    for (auto& in : inputs)
      if (in.recording) write_failures.note(in.recording->close());
    inputs.clear();
    broker.reset();
    failures_out.reset();
    metrics_out.reset();
  }
};

process_runtime::process_runtime(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
process_runtime::~process_runtime() = default;

result<std::unique_ptr<process_runtime>> process_runtime::create(const manifest& m,
                                                                 const std::string& process,
                                                                 const runtime_options& o) {
  const auto* p = m.find_process(process);
  if (!p) return error{m.source + ": no process named \"" + process + "\""};
  auto i = std::make_unique<impl>();
  i->m = m;
  i->self = *p;
  i->o = o;
  if (auto s = i->build(); !s) return error{"process " + process + ": " + s.message()};
  return std::unique_ptr<process_runtime>(new process_runtime(std::move(i)));
}

status process_runtime::run() {
  auto s = impl_->run();
  impl_->shutdown();
  // A recording whose last records or close failed (shutdown) fails the process as a write
  // failure while it ran does.
  if (s)
    if (auto w = impl_->write_failures.get(); !w)
      return error{"process " + impl_->self.name + ": " + w.message()};
  return s;
}

void process_runtime::stop() noexcept { impl_->stop_requested = true; }

}  // namespace kforge::pipeline

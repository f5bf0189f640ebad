#include "runtime/head_run.hpp"

#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <iomanip>
#include <ostream>
#include <sstream>

#include "common/clock.hpp"
#include "common/bind_address.hpp"
#include "common/visible_gpus.hpp"
#include "runtime/prometheus_text.hpp"
#include "stages/stage_factory.hpp"

namespace kforge::pipeline {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

std::atomic<int> g_signal{0};
void on_signal(int sig) { g_signal = sig; }

// How long processes and stages may take to start (head_run::starting) before the stall clock
// runs anyway: the head building the sampler and trainer of a 1.3B-parameter LoRA policy took
// about 25 s on an H100; a start ten times slower is broken, not slow.
constexpr auto max_startup = std::chrono::minutes(5);

}  // namespace

head_run::head_run(manifest m, std::optional<resume_point> resume, std::string snapshot,
                   bool stand_ins, std::ostream& out, std::ostream& err)
    : m_(std::move(m)),
      resume_(std::move(resume)),
      dir_(m_.run.run_dir),
      snapshot_(std::move(snapshot)),
      stand_ins_(stand_ins),
      out_(out),
      err_(err),
      progress_(m_.run.progress),
      version_(resume_ ? resume_->step : 0),
      refills_(static_cast<std::uint64_t>(m_.buffer.groups_per_batch), step_lookahead(m_), version_,
               static_cast<std::uint64_t>(m_.run.steps)),
      refill_quiet_(std::min(1.0, m_.run.stall_timeout_s / 4)) {}

head_run::~head_run() {
  for (auto& c : children_) kill_worker(c, "killed: the head ended before the run could start");
  stop_head_stages();
}

void head_run::stop_head_stages() {
  if (!head_thread_.joinable()) return;
  while (!head_ready_ && !head_done_) std::this_thread::sleep_for(10ms);
  if (head_rt_) head_rt_->stop();
  head_thread_.join();
}

int head_run::launch() {
  if (auto s = open_links(); !s) {
    err_ << s.message() << "\n";
    return 2;
  }
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::signal(SIGPIPE, SIG_IGN);
  started_ = clock_type::now();
  if (auto s = start_workers(); !s) {
    err_ << "kforge run: " << s.message() << "\n";
    return 1;
  }
  start_head_stages();
  open_metrics_outputs();
  next_heartbeat_ = last_activity_change_ = clock_type::now();
  return 0;
}

status head_run::open_links() {
  // The head's own sockets: control out, metrics in, and a weights subscriber for progress.
  for (auto l : {link::control, link::metrics})
    if (auto s = prepare_endpoint(m_.endpoint(l)); !s) return s;
  auto control = bus::publisher::bind(bind_address(m_.endpoint(link::control)));
  auto metrics_in = bus::receiver::bind(bind_address(m_.endpoint(link::metrics)));
  auto weights = bus::subscriber::connect(m_.endpoint(link::weights), {"weights"});
  if (!control || !metrics_in || !weights)
    return error{"kforge run: cannot open the head's links: " +
                 (!control ? control.message() : !metrics_in ? metrics_in.message() : weights.message())};
  control_.emplace(std::move(*control));
  metrics_in_.emplace(std::move(*metrics_in));
  weights_.emplace(std::move(*weights));
  if (m_.run.metrics_port <= 0) return {};
  auto e = metrics_endpoint::start("0.0.0.0", m_.run.metrics_port);
  if (!e) return error{"kforge run: " + e.message()};
  scrape_ = std::move(*e);
  if (auto resolved = resolve_gpu_groups(m_, visible_gpu_count())) scrape_gpus_ = std::move(*resolved);
  out_ << "metrics: http://0.0.0.0:" << scrape_->port() << "/metrics (Prometheus text format)\n";
  return {};
}

status head_run::start_workers() {
  // Other local processes run `kforge worker` on the snapshot; remote ones are started by the
  // launcher, or by the user.
  for (const auto& p : m_.processes) {
    if (p.head) continue;
    if (!p.is_local() && !remote_) {
      // The same flags a local child gets: a resumed leg's worker must know it resumes (its
      // buffer and task generator go on from the run directory; a fresh start clears them).
      out_ << "waiting for process " << p.name << " on node " << p.node
           << ": run there `kforge worker --manifest " << snapshot_ << " --process " << p.name
           << " --run-dir " << dir_ << " --steps " << m_.run.steps;
      if (resume_)
        out_ << " --resume-step " << resume_->step << " --resume-checkpoint " << resume_->checkpoint;
      // Flushed at once: with the output going to a file (a head started in the background) the
      // command would otherwise wait in the buffer while the run waits for it.
      out_ << "`" << std::endl;
      continue;
    }
    auto c = p.is_local() ? spawn_worker(snapshot_, p.name, dir_, m_.run.steps, resume_)
                          : spawn_worker(snapshot_, p.name, dir_, m_.run.steps, resume_,
                                         remote_->command(p, (fs::path(dir_) / "logs" / (p.name + ".log")).string()),
                                         remote_->where(p));
    if (!c) return c.err();
    c->required = required_process(p);
    if (!p.is_local()) out_ << "started process " << p.name << " as a " << c->where << "\n";
    children_.push_back(*c);
  }
  nlohmann::json procs = nlohmann::json::array();
  procs.push_back({{"name", m_.head().name}, {"pid", ::getpid()}, {"head", true}});
  for (const auto& c : children_) procs.push_back({{"name", c.name}, {"pid", c.pid}, {"head", false}});
  note_write(write_file_atomically((fs::path(dir_) / "processes.json").string(), procs.dump(2) + "\n"));
  return {};
}

void head_run::start_head_stages() {
  runtime_options ro;
  ro.run_dir = dir_;
  ro.resume = resume_;
  head_thread_ = std::thread([this, ro] {
    auto rt = process_runtime::create(m_, m_.head().name, ro);
    if (!rt) {
      head_error_ = rt.message();
      head_done_ = true;
      return;
    }
    head_rt_ = std::move(*rt);
    head_ready_ = true;
    if (auto s = head_rt_->run(); !s) head_error_ = s.message();
    head_done_ = true;
  });
}

void head_run::open_metrics_outputs() {
  // A resumed run's metrics go on after the first run's (their "t" restarts with this head).
  // A line at a time, each whole or not at all.
  if (auto f = file_writer::open((fs::path(dir_) / "metrics.jsonl").string(),
                                 resume_ ? file_writer::mode::append : file_writer::mode::truncate))
    metrics_file_.emplace(std::move(*f));
  else
    note_write(f.err());
  const auto& links = m_.record.links;
  if (std::find(links.begin(), links.end(), link::metrics) == links.end()) return;
  auto w = messages::recording_writer::create(recording_path(dir_, link::metrics, m_.head().name), "metrics",
                                              m_.record.max_bytes);
  if (w)
    metrics_recording_.emplace(std::move(*w));
  else
    note_write(w.err());  // the processes have started: the loop ends them
}

void head_run::note_write(status s) {
  if (write_failed_) write_failed_ = std::move(s);
}

void head_run::pump_links() {
  for (;;) {
    auto r = metrics_in_->receive(0ms);
    if (!r.ok()) continue;
    if (!r->has_value()) break;
    if (metrics_recording_) note_write(metrics_recording_->write(**r, wall_time_ns()));
    if (const auto* sm = (*r)->as<wire::StageMetrics>()) {
      wire::StageMetricsT t;
      sm->UnPackTo(&t);
      auto j = to_json(t);
      j["t"] = std::chrono::duration<double>(clock_type::now() - started_).count();
      if (metrics_file_) note_write(metrics_file_->append(j.dump() + "\n"));
      // Instance names are unique across the topology (stage_name in process_runtime.cpp).
      const auto key = t.stage;
      board_.heard(t.process, clock_type::now());
      board_.latest[key] = std::move(t);
    }
  }
  for (;;) {
    auto r = weights_->receive(0ms);
    if (!r.ok()) continue;
    if (!r->has_value()) break;
    if (const auto* w = (*r)->env.as<wire::PolicyWeights>()) version_ = std::max(version_, w->version());
  }
}

void head_run::publish(wire::ControlCommand command, const std::string& why) {
  wire::ControlT c;
  c.command = command;
  c.reason = why;
  messages::header h;
  h.sender = "head";
  h.message_id = ++heartbeat_seq_;
  (void)control_->publish("control", messages::pack(h, c), 100ms);
}

void head_run::reap() {
  for (auto& c : children_) {
    if (!reap_worker(c)) continue;
    board_.gone.insert(c.name);
    progress_.end(err_);
    const std::string which = "process " + c.name + " (" + (c.where.empty() ? "" : c.where + ", ") +
                              "pid " + std::to_string(c.pid) + ")";
    err_ << "kforge run: " << which << " " << c.exit << "\n";
    if (c.required && lost_.empty() && outcome_.empty()) {
      const auto log = (fs::path(dir_) / "logs" / (c.name + ".log")).string();
      const auto why = last_line_of(log);
      lost_ = which + " " + c.exit +
              (why.empty() ? "" : "; its log " + log + " ends: " + why);
    }
  }
}

void head_run::serve_metrics(clock_type::time_point now) {
  if (!scrape_ || now < next_scrape_text_) return;
  next_scrape_text_ = now + std::chrono::seconds(1);
  run_gauges g;
  g.policy_version = version_;
  g.steps = m_.run.steps;
  g.elapsed_s = std::chrono::duration<double>(now - started_).count();
  const double loop_s = work_started_ ? std::chrono::duration<double>(now - *work_started_).count() : 0.0;
  g.gpu_groups = gpu_groups_use(m_, scrape_gpus_, board_, loop_s);
  scrape_->publish(prometheus_text(board_, g));
}

void head_run::draw(bool force) {
  const double elapsed = std::chrono::duration<double>(clock_type::now() - started_).count();
  progress_.draw(err_, progress_text(board_, version_, m_.run.steps, elapsed, m_.run.time_limit_s), force);
}

bool head_run::should_stop(clock_type::time_point now) {
  auto stop = [&](std::string outcome, int code) {
    outcome_ = std::move(outcome);
    code_ = code;
    return true;
  };
  // A stage that cannot keep its results (the trainer's log, weights, a checkpoint) fails the run
  // at once, ahead of a last step that may have gone out without them.
  if (const auto why = board_.failure(); !why.empty()) {
    stage_failed_ = true;
    return stop("failed: " + why, 1);
  }
  if (version_ >= static_cast<std::uint64_t>(m_.run.steps)) {
    stopped_by_ = "steps";
    return stop("completed", 0);
  }
  // A time budget ends the run as its steps would: drained, checkpointed, exit 0. As on an
  // interrupt no new step is released, and the step in flight finishes if its batch completes
  // within the drain.
  if (m_.run.time_limit_s > 0 &&
      std::chrono::duration<double>(now - started_).count() >= m_.run.time_limit_s) {
    stopped_by_ = "time_limit_s";
    return stop("completed", 0);
  }
  if (g_signal) return stop("interrupted", 130);
  if (head_done_) return stop("failed: " + (head_error_.empty() ? std::string("head stopped") : head_error_), 1);
  if (!lost_.empty()) return stop("failed: " + lost_, 1);
  if (!write_failed_) return stop("failed: " + write_failed_.message(), 1);
  return false;
}

bool head_run::starting() const {
  // The head's own stages are still being built (the sampler's and trainer's policy loading: a
  // 1.3B-parameter one took over 20 s on an H100, while its process reported nothing).
  if (!head_ready_) return true;
  for (const auto& c : children_)  // a process that has not reported yet is still building its own
    if (board_.last_heard.count(c.name) == 0 && board_.gone.count(c.name) == 0) return true;
  return board_.starting();  // a sandbox worker starting its reference servers and runners
}

bool head_run::stalled(clock_type::time_point now) {
  if (now - last_activity_change_ <= std::chrono::duration<double>(m_.run.stall_timeout_s)) return false;
  std::ostringstream why;
  why << "stalled: nothing moved for " << m_.run.stall_timeout_s << " s (run.stall_timeout_s)";
  if (starting())
    why << "; a process or stage was still starting after "
        << std::chrono::duration_cast<std::chrono::seconds>(max_startup).count() << " s";
  if (refills_.in_a_row() > 0)
    why << " after " << refills_.in_a_row() << " refill step(s) in a row without a new policy "
        << "version; the buffer dropped " << board_.sum("buffer", &wire::StageMetricsT::dropped)
        << " samples";
  outcome_ = why.str();
  code_ = 1;
  return true;
}

void head_run::refill_if_dry(clock_type::time_point now) {
  if (now - last_activity_change_ < refill_quiet_ || !refills_.due(board_, version_)) return;
  publish(wire::ControlCommand::refill, "the loop ran dry");
  if (refills_.sent() != 1) return;
  progress_.end(err_);
  err_ << "kforge run: the loop ran dry at step " << version_ << " of " << m_.run.steps
       << ": the buffer dropped groups (" << board_.sum("buffer", &wire::StageMetricsT::dropped)
       << " samples so far), so a batch could not fill; releasing one more step of requests "
          "(summary.json counts them as refill_steps)\n";
}

void head_run::monitor() {
  while (true) {
    std::this_thread::sleep_for(50ms);  // pacing of the monitor only; no synchronisation rests on it
    pump_links();
    reap();
    const auto now = clock_type::now();
    if (now >= next_heartbeat_) {
      publish(wire::ControlCommand::start, "heartbeat");
      next_heartbeat_ = now + 250ms;
    }
    draw(false);
    serve_metrics(now);
    if (board_.activity() != last_activity_) {
      last_activity_ = board_.activity();
      last_activity_change_ = now;
      if (!work_started_) work_started_ = now;
    }
    // What is still starting has not stalled: the clock waits for it, for up to max_startup.
    if (starting() && now - started_ < max_startup) last_activity_change_ = now;
    if (should_stop(now)) break;
    refill_if_dry(now);
    if (stalled(now)) break;
  }
  const auto loop_ended = clock_type::now();
  loop_s_ = work_started_ ? std::chrono::duration<double>(loop_ended - *work_started_).count() : 0.0;
}

void head_run::drain() {
  // In-flight work settles (queues empty and counts still), at most 15 s. Not after a required
  // process died: what its stages held never settles; nor after a stage's fatal error: the
  // trainer could not keep what more work would give.
  const auto drain_until = clock_type::now() + 15s;
  std::uint64_t settled_at = ~0ull;
  int still = 0;
  while (clock_type::now() < drain_until && !head_done_ && lost_.empty() && !stage_failed_) {
    std::this_thread::sleep_for(100ms);
    pump_links();
    reap();
    serve_metrics(clock_type::now());
    publish(wire::ControlCommand::drain, "run " + outcome_);
    if (board_.queued(false) == 0 && board_.activity() == settled_at) {
      if (++still >= 5) break;
    } else {
      still = 0;
    }
    settled_at = board_.activity();
  }
}

bool head_run::trainer_gone() const {
  for (const auto& p : m_.processes)
    if (p.count(actor_kind::trainer) > 0 &&
        (p.head ? head_done_.load() : board_.gone.count(p.name) > 0))
      return true;
  return false;
}

std::optional<std::uint64_t> head_run::reported_checkpoint() const {
  std::optional<std::uint64_t> low;
  int n = 0;
  for (const auto& [name, st] : board_.latest) {
    if (st.kind != "trainer") continue;
    for (const auto& x : st.extra)
      if (x && x->name == "checkpoint_step") {
        ++n;
        low = std::min(low.value_or(x->value), x->value);
      }
  }
  return n >= m_.count(actor_kind::trainer) ? low : std::nullopt;
}

void head_run::checkpoint() {
  // Asked again until every trainer reports it (a command published before a subscriber joined is
  // lost), and bounded: a trainer stuck in a step, or gone with its process, must not hang the end
  // of a run.
  if (m_.count(actor_kind::trainer) == 0 || is_stand_in(actor_kind::trainer, &m_)) {
    checkpoint_note_ = "the stand-in trainer keeps no state";
    return;
  }
  if (version_ == 0) {
    checkpoint_note_ = "no step was trained";
    return;
  }
  const auto give_up = clock_type::now() + 60s;
  // A checkpoint the trainer fails to write is a fatal error of its stage: no use asking again.
  const auto fatal_before = board_.fatal_errors();
  auto unwritten = [&] { return board_.fatal_errors() > fatal_before; };
  bool done = false;
  while (!done && clock_type::now() < give_up && !trainer_gone() && !unwritten()) {
    publish(wire::ControlCommand::checkpoint, "run " + outcome_);
    std::this_thread::sleep_for(100ms);
    pump_links();
    serve_metrics(clock_type::now());
    reap();
    const auto low = reported_checkpoint();
    done = low && *low >= version_;
  }
  const auto low = reported_checkpoint();
  if (done) {
    checkpoint_ = "checkpoints/step-" + std::to_string(*low);
    return;
  }
  checkpoint_note_ =
      std::string(unwritten()      ? "the trainer could not write it (" + board_.failure() + ")"
                  : trainer_gone() ? "the trainer's process ended"
                                   : "no report in 60 s") +
      " before a checkpoint of step " + std::to_string(version_) +
      (low ? "; the last is checkpoints/step-" + std::to_string(*low) : "");
  err_ << "kforge run: no checkpoint of the last step: " << checkpoint_note_ << "\n";
}

void head_run::shut_down() {
  // Every process, then the head's own stages; their last metrics come in meanwhile. A process
  // waits up to final_counts_wait for its stages' last counts before it ends.
  const auto stop_until = clock_type::now() + 10s + final_counts_wait(m_.run);
  auto any_running = [&] {
    return std::any_of(children_.begin(), children_.end(), [](const auto& c) { return c.running; });
  };
  // A process started by hand on another node is no child of the head: its end cannot be seen, so
  // the shutdown is said for a while regardless. Said once it could be lost: the head's sockets
  // drop what is still unsent when they close, and a process that never hears it would wait out
  // its orphan timeout and end with an error.
  const bool by_hand = !remote_ && std::any_of(m_.processes.begin(), m_.processes.end(),
                                               [](const auto& p) { return !p.is_local(); });
  const auto by_hand_until = clock_type::now() + 2s;
  while ((any_running() || (by_hand && clock_type::now() < by_hand_until)) &&
         clock_type::now() < stop_until) {
    publish(wire::ControlCommand::shutdown, "run " + outcome_);
    std::this_thread::sleep_for(50ms);
    pump_links();
    reap();
  }
  for (auto& c : children_) kill_worker(c, "did not stop in time; killed");
  stop_head_stages();
  for (int i = 0; i < 10; ++i) {  // the head stages' final report is on its way
    std::this_thread::sleep_for(20ms);
    pump_links();
  }
  draw(true);
  progress_.end(err_);
  // The head's own files closed (synced: the run's record), their last errors seen, before the
  // summary says how the run went.
  if (metrics_recording_) note_write(metrics_recording_->close());
  if (metrics_file_) {
    note_write(metrics_file_->sync());
    note_write(metrics_file_->close());
  }
  if (!write_failed_ && code_ == 0) {
    outcome_ = "failed: " + write_failed_.message();
    code_ = 1;
  }
  // A result the trainer could not write since the loop ended (the last checkpoint above): the run
  // did not keep what it trained.
  if (const auto why = board_.failure(); !why.empty() && code_ == 0) {
    outcome_ = "failed: " + why;
    code_ = 1;
  }
}

}  // namespace kforge::pipeline

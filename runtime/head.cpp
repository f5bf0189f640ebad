#include "runtime/head.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <csignal>
#include <sstream>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <optional>
#include <nlohmann/json.hpp>
#include <ostream>
#include <thread>
#include <vector>

#include "bus/channel.hpp"
#include "bus/pubsub.hpp"
#include "common/clock.hpp"
#include "common/file_writer.hpp"
#include "common/subprocess.hpp"
#include "common/visible_gpus.hpp"
#include "messages/recording.hpp"
#include "stages/infra_error_log.hpp"
#include "config/manifest.hpp"
#include "runtime/process_runtime.hpp"
#include "runtime/readiness.hpp"
#include "runtime/host_check.hpp"
#include "report/report.hpp"
#include "runtime/run_metrics.hpp"
#include "stages/stage_factory.hpp"
#include "stages/task_generator.hpp"
#include "sandbox/child_setup.hpp"
#if defined(KFORGE_HAVE_TORCH)
#include "trainer/checkpoint.hpp"
#endif

namespace kforge::pipeline {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace {

std::atomic<int> g_signal{0};
void on_signal(int sig) { g_signal = sig; }

struct child {
  std::string name;
  pid_t pid = -1;
  bool running = true;
  bool required = true;  ///< the run cannot go on without it (required_process)
  std::string exit;  ///< how it ended, once it has
};

/// Whether the run needs process `p` to the end: one hosting only sandbox workers may die (the
/// pool re-queues what they held and the other workers judge it); the loss of any other stage
/// stops the loop for good, so the run ends as failed at once rather than as stalled much later.
bool required_process(const process_spec& p) {
  for (auto k : all_actor_kinds)
    if (k != actor_kind::sandbox_worker && p.count(k) > 0) return true;
  return false;
}

/// The last non-empty line of the text file `path` ("" when there is none): a worker's log ends
/// with why it stopped.
std::string last_line_of(const std::string& path) {
  std::ifstream in(path);
  std::string last;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) last = line;
  return last;
}

result<child> spawn_child(const std::string& manifest_path, const std::string& process,
                          const std::string& run_dir, std::int64_t steps,
                          const std::optional<resume_point>& resume) {
  const auto exe = self_executable();
  std::vector<std::string> args{exe,        "worker",  "--manifest", manifest_path,
                                "--process", process,   "--run-dir",  run_dir,
                                "--steps",   std::to_string(steps)};
  if (resume)
    for (const auto& a : {std::string("--resume-step"), std::to_string(resume->step),
                          std::string("--resume-checkpoint"), resume->checkpoint})
      args.push_back(a);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const auto log = (fs::path(run_dir) / "logs" / (process + ".log")).string();
  // A resumed run's process logs go on after the first run's.
  const int mode = O_WRONLY | O_CREAT | O_CLOEXEC | (resume ? O_APPEND : O_TRUNC);
  const pid_t pid = ::fork();
  if (pid < 0) return error{"cannot start process " + process + ": fork failed"};
  if (pid == 0) {
    const int fd = ::open(log.c_str(), mode, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    ::execv(exe.c_str(), argv.data());
    ::_exit(127);
  }
  return child{process, pid, true, true, ""};
}

constexpr const char* overrides_marker = "# kforge run overrides:";

/// The newest complete checkpoint under RUN_DIR/checkpoints: a directory named exactly step-N (a
/// save in progress is step-N.tmp, one being replaced step-N.old) holding all of
/// trainer/checkpoint.hpp's files. nullopt when there is none.
std::optional<resume_point> newest_checkpoint(const fs::path& run_dir) {
  std::optional<resume_point> best;
  std::error_code ec;
  for (fs::directory_iterator it(run_dir / "checkpoints", ec), end; !ec && it != end;
       it.increment(ec)) {
    const auto name = it->path().filename().string();
    if (name.rfind("step-", 0) != 0 || name.size() == 5 ||
        name.find_first_not_of("0123456789", 5) != std::string::npos)
      continue;
    bool whole = it->is_directory();
    for (const char* f : {"model.safetensors", "optimizer.pt", "trainer_state.json"})
      whole = whole && fs::exists(it->path() / f);
    if (name.size() > 5 + 18) continue;  // more digits than a step count has
    const auto step = std::stoull(name.substr(5));
    if (whole && (!best || step > best->step)) best = resume_point{step, it->path().string()};
  }
  return best;
}

/// The checkpoint's own record of its step, read before anything of the run directory is moved:
/// one whose trainer_state.json is unreadable or holds another step than its name says stops the
/// resume here, not after the last leg's files were moved aside for a leg that cannot start.
status check_checkpoint(const resume_point& at) {
#if defined(KFORGE_HAVE_TORCH)
  auto st = trainer::read_checkpoint_state(at.checkpoint);
  if (!st) return st.err();
  return {};
#else
  return error{at.checkpoint + ": this kforge is built without LibTorch, so it has no trainer to "
               "resume"};
#endif
}

/// Moves `from` to `to` unless `to` exists: the files of the leg that ended at a checkpoint stay
/// under their before-step names when a leg resumed from it stops and is resumed again.
void move_aside(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  if (fs::exists(to, ec) || ec) return;
  fs::rename(from, to, ec);  // a file the last leg did not write (ENOENT) leaves nothing to move
}

/// A run to continue: RUN_DIR's manifest snapshot with the first run's overrides (the line the
/// head appended) applied again, run.run_dir = RUN_DIR, and its newest complete checkpoint.
struct resumed_run {
  manifest m;
  resume_point at;
};

result<resumed_run> open_resumed_run(const std::string& run_dir,
                                     std::optional<std::int64_t> steps) {
  const auto snapshot = fs::path(run_dir) / "manifest.toml";
  if (!fs::exists(snapshot))
    return error{"--resume " + run_dir + ": no manifest.toml there (not a run directory?)"};
  auto loaded = load_manifest(snapshot.string());
  if (!loaded) return error{"--resume " + run_dir + ": " + loaded.message()};
  resumed_run r{std::move(*loaded), {}};
  auto& m = r.m;
  // Drop the override lines from the text (a new one is written below the text again) and apply
  // the steps they record: the first run's --steps is part of what it was asked to do.
  std::istringstream lines(m.text);
  std::string text;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(overrides_marker, 0) != 0) {
      text += line + "\n";
      continue;
    }
    const auto at = line.find("steps = ");
    if (at == std::string::npos) continue;
    try {
      m.run.steps = std::stoll(line.substr(at + 8));
    } catch (const std::exception&) {
      return error{"--resume " + run_dir + ": manifest.toml: a bad overrides line (no step count "
                   "after \"steps = \"): " + line};
    }
  }
  while (text.size() >= 2 && text.compare(text.size() - 2, 2, "\n\n") == 0) text.pop_back();
  m.text = text;
  m.run.run_dir = run_dir;
  if (steps) m.run.steps = *steps;
  if (m.sampler.model.empty())
    return error{"--resume " + run_dir +
                 ": this run's sampler has no model (sampler.model is empty), so its trainer was "
                 "the stand-in, which keeps no state; resume needs the real trainer"};
  auto at = newest_checkpoint(run_dir);
  if (!at)
    return error{"--resume " + run_dir + ": no complete checkpoint under " +
                 (fs::path(run_dir) / "checkpoints").string()};
  if (auto s = check_checkpoint(*at); !s) return error{"--resume " + run_dir + ": " + s.message()};
  if (at->step >= static_cast<std::uint64_t>(m.run.steps))
    return error{"--resume " + run_dir + ": nothing to do: already at step " +
                 std::to_string(at->step) + " of " + std::to_string(m.run.steps) +
                 " (raise it with --steps)"};
  r.at = std::move(*at);
  return r;
}

std::string describe_exit(int st) {
  if (WIFEXITED(st)) return "exited with status " + std::to_string(WEXITSTATUS(st));
  if (WIFSIGNALED(st)) return std::string("killed by signal ") + std::to_string(WTERMSIG(st)) +
                              " (" + ::strsignal(WTERMSIG(st)) + ")";
  return "ended";
}

}  // namespace

int worker_command(const worker_command_options& opt, std::ostream& err) {
  auto m = load_manifest(opt.manifest);
  if (!m) {
    err << "kforge worker: " << m.message() << "\n";
    return 2;
  }
  if (opt.steps) m->run.steps = *opt.steps;
  // As in the head: the stages' files (compile cache, weights) go to the run directory in use.
  if (opt.run_dir) m->run.run_dir = *opt.run_dir;
  runtime_options ro;
  ro.run_dir = m->run.run_dir;
  if (opt.resume_step && opt.resume_checkpoint)
    ro.resume = resume_point{*opt.resume_step, *opt.resume_checkpoint};
  auto rt = process_runtime::create(*m, opt.process, ro);
  if (!rt) {
    err << "kforge worker: " << rt.message() << "\n";
    return 1;
  }
  err << "kforge worker: process " << opt.process << " running (pid " << ::getpid() << ")\n";
  auto s = (*rt)->run();
  if (!s) {
    err << "kforge worker: " << s.message() << "\n";
    return 1;
  }
  err << "kforge worker: process " << opt.process << " shut down\n";
  return 0;
}

int run_command(const run_command_options& opt, std::ostream& out, std::ostream& err) {
  if (opt.steps && *opt.steps < 1) {
    err << "kforge run: --steps must be >= 1, got " << *opt.steps << "\n";
    return 2;
  }
  if (opt.time_limit_s && !(*opt.time_limit_s >= 0)) {
    err << "kforge run: --time-limit must be >= 0 seconds (0: none), got " << *opt.time_limit_s
        << "\n";
    return 2;
  }
  std::optional<resume_point> resume;
  manifest m;
  if (opt.resume) {
    if (opt.manifest || opt.run_dir) {
      err << "kforge run: --resume continues a run with its own manifest and directory; drop "
             "--manifest and --run-dir\n";
      return 2;
    }
    auto r = open_resumed_run(*opt.resume, opt.steps);
    if (!r) {
      err << "kforge run: " << r.message() << "\n";
      return 2;
    }
    m = std::move(r->m);
    resume = std::move(r->at);
  } else {
    auto loaded = opt.manifest ? load_manifest(*opt.manifest) : default_manifest();
    if (!loaded) {
      err << "kforge run: " << loaded.message() << "\n";
      return 2;
    }
    m = std::move(*loaded);
    if (opt.steps) m.run.steps = *opt.steps;
    if (opt.run_dir) m.run.run_dir = *opt.run_dir;
  }
  if (opt.progress) m.run.progress = *opt.progress;
  if (opt.time_limit_s) m.run.time_limit_s = *opt.time_limit_s;

  out << "kforge run: manifest " << m.source << "\n" << m.summary() << "\n";
  if (resume)
    out << "resuming at step " << resume->step << " of " << m.run.steps << " from "
        << resume->checkpoint << "\n" << dedup_left_out_note(m) << "\n";
  const auto host = probe_host();
  out << readiness_report(m, host) << "\n";
  // --check: what the run needs on this host, one line each, before the checks that stop a run.
  const auto needs = opt.check_only ? host_checks(m, host) : std::vector<host_check>{};
  if (opt.check_only) out << "checks:\n" << format_host_checks(needs) << "\n";
  bool stand_ins = false;
  for (auto k : all_actor_kinds) stand_ins = stand_ins || (is_stand_in(k, &m) && m.count(k) > 0);
  if (stand_ins)
    out << "NOTE: stand-ins run in place of the stages not built yet (marked above); what they\n"
           "send is synthetic. The topology, bus, actors, recordings, metrics and the stages\n"
           "marked \"real\" are real. Nothing is trained on while the trainer is a stand-in.\n\n";
  // A sampler this host will run is refused where it would be on the CPU against
  // sampler.require_gpu: after the plan and what each stage needs here are printed, before any
  // process starts (one on another node checks its own host).
  bool samplers_here = true;
  for (const auto* p : m.hosts(actor_kind::sampler)) samplers_here = samplers_here && p->is_local();
  if (auto s = samplers_here ? check_sampler_gpu(m) : status{}; !s) {
    err << "kforge run: " << s.message() << "\n";
    return 2;
  }
  // The task pool is loaded here as well as in its process, so a bad task file or prompt template
  // stops the run before anything starts. Only for a generator on this host: a remote node reads
  // its own files. The check asks no GPU: the generator does that once, when it starts.
  for (const auto* p : m.hosts(actor_kind::task_generator)) {
    if (!p->is_local() || m.tasks.source == task_source_kind::stand_in) continue;
    if (auto s = check_task_generator(m); !s) {
      err << "kforge run: " << m.source << ": " << s.message() << "\n";
      return 2;
    }
  }
  if (opt.check_only) return all_passed(needs) ? 0 : 2;

  // The run directory, and the manifest snapshot every process of this run reads.
  const auto& dir = m.run.run_dir;
  std::error_code ec;
  for (const char* sub : {"", "recordings", "logs"}) fs::create_directories(fs::path(dir) / sub, ec);
  if (ec) {
    err << "kforge run: cannot create run directory " << dir << ": " << ec.message() << "\n";
    return 2;
  }
  // The snapshot first: a directory it cannot be written to stops the run before anything in it
  // is moved.
  const auto snapshot = (fs::path(dir) / "manifest.toml").string();
  {
    std::string text = m.text;
    // Command-line overrides reach the other processes as worker options, not through this file;
    // --resume reads them back from this line.
    if (opt.steps || opt.run_dir || resume)
      text += "\n" + std::string(overrides_marker) + " steps = " + std::to_string(m.run.steps) +
              ", run_dir = \"" + dir + "\"\n";
    if (auto s = write_file_atomically(snapshot, text); !s) {
      err << "kforge run: " << s.message() << "\n";
      return 2;
    }
  }
  if (resume) {
    // The first run's recordings and summary stay, next to this leg's.
    const auto leg = "before-step-" + std::to_string(resume->step);
    move_aside(fs::path(dir) / "recordings", fs::path(dir) / ("recordings-" + leg));
    fs::create_directories(fs::path(dir) / "recordings", ec);
    move_aside(fs::path(dir) / "summary.json", fs::path(dir) / ("summary-" + leg + ".json"));
    move_aside(infra_error_log::path_in(dir), fs::path(dir) / ("infra_errors-" + leg + ".jsonl"));
  } else {
    fs::remove(infra_error_log::path_in(dir), ec);  // an earlier run's, into the same directory
  }
  ec.clear();

  // The head's own sockets: control out, metrics in, and a weights subscriber for progress.
  if (auto s = prepare_endpoint(m.endpoint(link::control)); !s) { err << s.message() << "\n"; return 2; }
  if (auto s = prepare_endpoint(m.endpoint(link::metrics)); !s) { err << s.message() << "\n"; return 2; }
  auto control = bus::publisher::bind(bind_address(m.endpoint(link::control)));
  auto metrics_in = bus::receiver::bind(bind_address(m.endpoint(link::metrics)));
  auto weights = bus::subscriber::connect(m.endpoint(link::weights), {"weights"});
  if (!control || !metrics_in || !weights) {
    err << "kforge run: cannot open the head's links: "
        << (!control ? control.message() : !metrics_in ? metrics_in.message() : weights.message())
        << "\n";
    return 2;
  }

  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::signal(SIGPIPE, SIG_IGN);
  const auto started = clock_type::now();

  // Other local processes run `kforge worker` on the snapshot; remote ones are started by the user.
  std::vector<child> children;
  for (const auto& p : m.processes) {
    if (p.head) continue;
    if (!p.is_local()) {
      // The same flags a local child gets: a resumed leg's worker must know it resumes (its
      // buffer and task generator go on from the run directory; a fresh start clears them).
      out << "waiting for process " << p.name << " on node " << p.node
          << ": run there `kforge worker --manifest " << snapshot << " --process " << p.name
          << " --run-dir " << dir << " --steps " << m.run.steps;
      if (resume)
        out << " --resume-step " << resume->step << " --resume-checkpoint " << resume->checkpoint;
      out << "`\n";
      continue;
    }
    auto c = spawn_child(snapshot, p.name, dir, m.run.steps, resume);
    if (!c) {
      err << "kforge run: " << c.message() << "\n";
      return 1;
    }
    c->required = required_process(p);
    children.push_back(*c);
  }
  // The first file the head fails to write (processes.json, metrics): the loop ends with it, and
  // a run that cannot keep its results does not report itself completed.
  status write_failed;
  auto note_write = [&](status s) {
    if (write_failed) write_failed = std::move(s);
  };
  {
    nlohmann::json procs = nlohmann::json::array();
    procs.push_back({{"name", m.head().name}, {"pid", ::getpid()}, {"head", true}});
    for (const auto& c : children) procs.push_back({{"name", c.name}, {"pid", c.pid}, {"head", false}});
    note_write(write_file_atomically((fs::path(dir) / "processes.json").string(), procs.dump(2) + "\n"));
  }

  // The head's own share of the stages runs on its own thread; this one monitors.
  runtime_options ro;
  ro.run_dir = dir;
  ro.resume = resume;
  std::unique_ptr<process_runtime> head_rt;
  std::atomic<bool> head_ready{false}, head_done{false};
  std::string head_error;
  std::thread head_thread([&] {
    auto rt = process_runtime::create(m, m.head().name, ro);
    if (!rt) {
      head_error = rt.message();
      head_done = true;
      return;
    }
    head_rt = std::move(*rt);
    head_ready = true;
    if (auto s = head_rt->run(); !s) head_error = s.message();
    head_done = true;
  });

  // A resumed run's metrics go on after the first run's (their "t" restarts with this head).
  // A line at a time, each whole or not at all.
  std::optional<file_writer> metrics_file;
  if (auto f = file_writer::open((fs::path(dir) / "metrics.jsonl").string(),
                                 resume ? file_writer::mode::append : file_writer::mode::truncate))
    metrics_file.emplace(std::move(*f));
  else
    note_write(f.err());
  std::optional<messages::recording_writer> metrics_recording;
  if (std::find(m.record.links.begin(), m.record.links.end(), link::metrics) != m.record.links.end()) {
    auto w = messages::recording_writer::create(recording_path(dir, link::metrics, m.head().name),
                                                "metrics", m.record.max_bytes);
    if (w)
      metrics_recording.emplace(std::move(*w));
    else
      note_write(w.err());  // the processes have started: the loop ends them
  }
  metrics_board board;
  progress_line progress(m.run.progress);
  std::uint64_t version = resume ? resume->step : 0, heartbeat_seq = 0;
  auto next_heartbeat = clock_type::now();
  auto last_activity_change = clock_type::now();
  std::uint64_t last_activity = 0;
  // The loop's window, for seconds per step and the GPU groups' idle fractions: from the first
  // work any stage reports (process start-up and model loading left out) to the end of the main
  // loop (drain and shutdown left out). Seen through metrics, so within a report interval.
  std::optional<clock_type::time_point> work_started;
  std::string outcome;
  std::string stopped_by;  // why a completed run stopped: "steps" or "time_limit_s"
  int code = 0;
  // Refills (step_driver, process_runtime.cpp): a loop that ran dry short of its steps because
  // the buffer dropped groups gets one more step of requests once the counts have held still.
  refill_policy refills(static_cast<std::uint64_t>(m.buffer.groups_per_batch), step_lookahead(m),
                        version, static_cast<std::uint64_t>(m.run.steps));
  const auto refill_quiet = std::chrono::duration<double>(std::min(1.0, m.run.stall_timeout_s / 4));

  auto pump_head_links = [&] {
    for (;;) {
      auto r = metrics_in->receive(0ms);
      if (!r.ok()) continue;
      if (!r->has_value()) break;
      if (metrics_recording) note_write(metrics_recording->write(**r, wall_time_ns()));
      if (const auto* sm = (*r)->as<wire::StageMetrics>()) {
        wire::StageMetricsT t;
        sm->UnPackTo(&t);
        auto j = to_json(t);
        j["t"] = std::chrono::duration<double>(clock_type::now() - started).count();
        if (metrics_file) note_write(metrics_file->append(j.dump() + "\n"));
        // Instance names are unique across the topology (stage_name in process_runtime.cpp).
        const auto key = t.stage;
        board.latest[key] = std::move(t);
      }
    }
    for (;;) {
      auto r = weights->receive(0ms);
      if (!r.ok()) continue;
      if (!r->has_value()) break;
      if (const auto* w = (*r)->env.as<wire::PolicyWeights>()) version = std::max(version, w->version());
    }
  };
  auto publish_control = [&](wire::ControlCommand cmd, const std::string& why) {
    wire::ControlT c;
    c.command = cmd;
    c.reason = why;
    messages::header h;
    h.sender = "head";
    h.message_id = ++heartbeat_seq;
    (void)control->publish("control", messages::pack(h, c), 100ms);
  };
  // The first required process that ended before the run did: the run fails with it.
  std::string lost;
  auto reap = [&] {
    for (auto& c : children) {
      if (!c.running) continue;
      int st = 0;
      if (::waitpid(c.pid, &st, WNOHANG) == c.pid) {
        c.running = false;
        c.exit = describe_exit(st);
        board.gone.insert(c.name);
        progress.end(err);
        err << "kforge run: process " << c.name << " (pid " << c.pid << ") " << c.exit << "\n";
        if (c.required && lost.empty() && outcome.empty()) {
          const auto log = (fs::path(dir) / "logs" / (c.name + ".log")).string();
          const auto why = last_line_of(log);
          lost = "process " + c.name + " (pid " + std::to_string(c.pid) + ") " + c.exit +
                 (why.empty() ? "" : "; its log " + log + " ends: " + why);
        }
      }
    }
  };
  auto draw = [&](bool force) {
    using M = wire::StageMetricsT;
    std::ostringstream s;
    s << "step " << version << "/" << m.run.steps << " | candidates "
      << board.sum("sampler", &M::sent) << " | verdicts " << board.sum("reward", &M::received)
      << " | batches " << board.sum("trainer", &M::received) << " | queued " << board.queued(false)
      << " | workers " << board.extra("sandbox_pool", "workers_alive") << " alive, "
      << board.extra("sandbox_pool", "requeued") << " requeued | "
      << std::fixed << std::setprecision(1)
      << std::chrono::duration<double>(clock_type::now() - started).count() << " s";
    progress.draw(err, s.str(), force);
  };

  // Main loop: until the steps are done, a signal, the head's stages fail, or nothing moves.
  bool stage_failed = false;  // the loop ended on a stage's fatal error
  const auto stall_after = std::chrono::duration<double>(m.run.stall_timeout_s);
  while (true) {
    std::this_thread::sleep_for(50ms);  // pacing of the monitor only; no synchronisation rests on it
    pump_head_links();
    reap();
    const auto now = clock_type::now();
    if (now >= next_heartbeat) {
      publish_control(wire::ControlCommand::start, "heartbeat");
      next_heartbeat = now + 250ms;
    }
    draw(false);
    if (board.activity() != last_activity) {
      last_activity = board.activity();
      last_activity_change = now;
      if (!work_started) work_started = now;
    }
    // A stage that cannot keep its results (the trainer's log, weights, a checkpoint) fails the run
    // at once, ahead of a last step that may have gone out without them.
    if (const auto why = board.failure(); !why.empty()) {
      outcome = "failed: " + why;
      code = 1;
      stage_failed = true;
      break;
    }
    if (version >= static_cast<std::uint64_t>(m.run.steps)) {
      outcome = "completed";
      stopped_by = "steps";
      break;
    }
    // A time budget ends the run as its steps would: drained, checkpointed, exit 0. As on an
    // interrupt no new step is released, and the step in flight finishes if its batch completes
    // within the drain.
    if (m.run.time_limit_s > 0 &&
        std::chrono::duration<double>(now - started).count() >= m.run.time_limit_s) {
      outcome = "completed";
      stopped_by = "time_limit_s";
      break;
    }
    if (g_signal) {
      outcome = "interrupted";
      code = 130;
      break;
    }
    if (head_done) {
      outcome = "failed: " + (head_error.empty() ? std::string("head stopped") : head_error);
      code = 1;
      break;
    }
    if (!lost.empty()) {
      outcome = "failed: " + lost;
      code = 1;
      break;
    }
    if (!write_failed) {
      outcome = "failed: " + write_failed.message();
      code = 1;
      break;
    }
    if (now - last_activity_change >= refill_quiet && refills.due(board, version)) {
      publish_control(wire::ControlCommand::refill, "the loop ran dry");
      if (refills.sent() == 1) {
        progress.end(err);
        err << "kforge run: the loop ran dry at step " << version << " of " << m.run.steps
            << ": the buffer dropped groups (" << board.sum("buffer", &wire::StageMetricsT::dropped)
            << " samples so far), so a batch could not fill; releasing one more step of requests "
               "(summary.json counts them as refill_steps)\n";
      }
    }
    if (now - last_activity_change > stall_after) {
      std::ostringstream why;
      why << "stalled: nothing moved for " << m.run.stall_timeout_s << " s (run.stall_timeout_s)";
      if (refills.in_a_row() > 0)
        why << " after " << refills.in_a_row() << " refill step(s) in a row without a new policy "
            << "version; the buffer dropped " << board.sum("buffer", &wire::StageMetricsT::dropped)
            << " samples";
      outcome = why.str();
      code = 1;
      break;
    }
  }

  const auto loop_ended = clock_type::now();
  const double loop_s =
      work_started ? std::chrono::duration<double>(loop_ended - *work_started).count() : 0.0;

  // Drain: let in-flight work settle (queues empty and counts still), at most 15 s. Not after a
  // required process died: what its stages held never settles; nor after a stage's fatal error:
  // the trainer could not keep what more work would give.
  const auto drain_until = clock_type::now() + 15s;
  std::uint64_t settled_at = ~0ull;
  int still = 0;
  while (clock_type::now() < drain_until && !head_done && lost.empty() && !stage_failed) {
    std::this_thread::sleep_for(100ms);
    pump_head_links();
    reap();
    publish_control(wire::ControlCommand::drain, "run " + outcome);
    if (board.queued(false) == 0 && board.activity() == settled_at) {
      if (++still >= 5) break;
    } else {
      still = 0;
    }
    settled_at = board.activity();
  }
  // Checkpoint: the trainers save the last step, so the run can go on with --resume. Asked again
  // until every trainer reports it (a command published before a subscriber joined is lost), and
  // bounded: a trainer stuck in a step, or gone with its process, must not hang the end of a run.
  nlohmann::json checkpoint;  // null: none
  std::string checkpoint_note;
  {
    const auto trainers = m.count(actor_kind::trainer);
    auto trainer_gone = [&] {
      for (const auto& p : m.processes)
        if (p.count(actor_kind::trainer) > 0 &&
            (p.head ? head_done.load() : board.gone.count(p.name) > 0))
          return true;
      return false;
    };
    // The lowest step the trainers report, once every one of them has reported one.
    auto reported = [&]() -> std::optional<std::uint64_t> {
      std::optional<std::uint64_t> low;
      int n = 0;
      for (const auto& [name, st] : board.latest) {
        if (st.kind != "trainer") continue;
        for (const auto& x : st.extra)
          if (x && x->name == "checkpoint_step") {
            ++n;
            low = std::min(low.value_or(x->value), x->value);
          }
      }
      return n >= trainers ? low : std::nullopt;
    };
    if (trainers == 0 || is_stand_in(actor_kind::trainer, &m)) {
      checkpoint_note = "the stand-in trainer keeps no state";
    } else if (version == 0) {
      checkpoint_note = "no step was trained";
    } else {
      const auto give_up = clock_type::now() + 60s;
      // A checkpoint the trainer fails to write is a fatal error of its stage: no use asking again.
      const auto fatal_before = board.fatal_errors();
      auto unwritten = [&] { return board.fatal_errors() > fatal_before; };
      bool done = false;
      while (!done && clock_type::now() < give_up && !trainer_gone() && !unwritten()) {
        publish_control(wire::ControlCommand::checkpoint, "run " + outcome);
        std::this_thread::sleep_for(100ms);
        pump_head_links();
        reap();
        const auto low = reported();
        done = low && *low >= version;
      }
      const auto low = reported();
      if (done) {
        checkpoint = "checkpoints/step-" + std::to_string(*low);
      } else {
        checkpoint_note = std::string(unwritten()       ? "the trainer could not write it ("
                                                                            + board.failure() + ")"
                                      : trainer_gone() ? "the trainer's process ended"
                                                       : "no report in 60 s") +
                          " before a checkpoint of step " + std::to_string(version) +
                          (low ? "; the last is checkpoints/step-" + std::to_string(*low) : "");
        err << "kforge run: no checkpoint of the last step: " << checkpoint_note << "\n";
      }
    }
  }

  // Shut down: every process, then the head's own stages; their last metrics come in meanwhile.
  const auto stop_until = clock_type::now() + 10s;
  auto any_running = [&] {
    for (const auto& c : children)
      if (c.running) return true;
    return false;
  };
  while (any_running() && clock_type::now() < stop_until) {
    publish_control(wire::ControlCommand::shutdown, "run " + outcome);
    std::this_thread::sleep_for(50ms);
    pump_head_links();
    reap();
  }
  for (auto& c : children)
    if (c.running) {
      ::kill(c.pid, SIGKILL);
      int st = 0;
      ::waitpid(c.pid, &st, 0);
      c.running = false;
      c.exit = "did not stop in 10 s; killed";
    }
  while (!head_ready && !head_done) std::this_thread::sleep_for(10ms);
  if (head_rt) head_rt->stop();
  head_thread.join();
  for (int i = 0; i < 10; ++i) {  // the head stages' final report is on its way
    std::this_thread::sleep_for(20ms);
    pump_head_links();
  }
  draw(true);
  progress.end(err);
  // The head's own files closed (synced: the run's record), their last errors seen, before the
  // summary says how the run went.
  if (metrics_recording) note_write(metrics_recording->close());
  if (metrics_file) {
    note_write(metrics_file->sync());
    note_write(metrics_file->close());
  }
  if (!write_failed && code == 0) {
    outcome = "failed: " + write_failed.message();
    code = 1;
  }
  // A result the trainer could not write since the loop ended (the last checkpoint above): the run
  // did not keep what it trained.
  if (const auto why = board.failure(); !why.empty() && code == 0) {
    outcome = "failed: " + why;
    code = 1;
  }

  // Summary: the outcome, the final counts and whether they balance.
  const auto checks = balance(board);
  const auto unjudged = unjudged_at_stop(board);  // counted in the checks; said on its own too
  bool balanced = true;
  nlohmann::json js_checks = nlohmann::json::array();
  for (const auto& c : checks) {
    balanced = balanced && c.ok();
    js_checks.push_back({{"check", c.what}, {"left", c.left}, {"right", c.right}, {"ok", c.ok()}});
  }
  nlohmann::json stages = nlohmann::json::array();
  for (const auto& [k, s] : board.latest) stages.push_back(to_json(s));
  nlohmann::json procs = nlohmann::json::array();
  for (const auto& c : children) procs.push_back({{"name", c.name}, {"pid", c.pid}, {"exit", c.exit}});
  const double elapsed = std::chrono::duration<double>(clock_type::now() - started).count();
  // GPUs as this host resolves the groups (what the local stages got); an unresolvable manifest
  // would not have started, but keeps its explicit lists if it did.
  auto resolved = resolve_gpu_groups(m, visible_gpu_count());
  const auto groups = gpu_groups_use(
      m, resolved ? *resolved : std::map<std::string, std::vector<int>>{}, board, loop_s);
  nlohmann::json js_groups = nlohmann::json::array();
  for (const auto& g : groups) js_groups.push_back(to_json(g));
  nlohmann::json summary = {{"outcome", outcome},   {"steps", m.run.steps},
                            {"versions", version},  {"elapsed_s", elapsed},
                            {"balanced", balanced}, {"checks", js_checks},
                            {"stages", stages},     {"processes", procs},
                            {"stand_ins", stand_ins},
                            {"mode", m.run.mode == run_mode::sync ? "sync" : "async"},
                            {"loop_s", loop_s},     {"gpu_groups", js_groups},
                            {"checkpoint", checkpoint},
                            {"stopped_by", stopped_by.empty() ? nlohmann::json() : nlohmann::json(stopped_by)},
                            {"time_limit_s", m.run.time_limit_s},
                            {"unjudged_at_stop", unjudged},
                            {"refill_steps", refills.sent()},
                            {"sandbox_time_per_candidate", to_json(sandbox_time_of(board))},
                            {"resumed_from",
                             resume ? nlohmann::json(resume->step) : nlohmann::json()}};
  if (checkpoint.is_null()) summary["checkpoint_note"] = checkpoint_note;
  // What this host grants the sandbox's candidate children (the banner said it too).
  if (m.sandbox.backend == sandbox_backend::nvcc && visible_gpu_count() > 0)
    summary["sandbox_candidate_children"] = sandbox::describe_candidate_confinement(m.sandbox.confine);
  // Per published version over the loop's window (not elapsed_s, whose start-up and shutdown are
  // fixed costs that would blur a sync/async comparison); null before the first version.
  // A resumed run counts the versions of this leg only, its loop being this leg's.
  const std::uint64_t leg_versions = version - std::min(version, resume ? resume->step : 0);
  summary["seconds_per_step"] = leg_versions > 0
                                   ? nlohmann::json(loop_s / static_cast<double>(leg_versions))
                                   : nlohmann::json();
  if (auto s = write_file_atomically((fs::path(dir) / "summary.json").string(), summary.dump(2) + "\n");
      !s) {
    err << "kforge run: " << s.message() << "\n";
    if (code == 0) {
      outcome = "failed: " + s.message();
      code = 1;
    }
  }

  out << "\nkforge run: " << outcome;
  if (stopped_by == "time_limit_s")
    out << " (time limit of " << m.run.time_limit_s << " s reached at step " << version << " of "
        << m.run.steps << ")";
  out << " after " << std::fixed << std::setprecision(1) << elapsed << " s; " << version
      << " policy versions; run directory " << dir << "\n";
  out << std::left << std::setw(26) << "stage" << std::right << std::setw(10) << "received"
      << std::setw(10) << "sent" << std::setw(9) << "dropped" << std::setw(8) << "errors"
      << std::setw(8) << "queued" << std::setw(11) << "p50 us" << "\n";
  for (const auto& [k, s] : board.latest) {
    if (s.kind == "bus" && s.errors == 0) continue;
    out << std::left << std::setw(26) << k << std::right << std::setw(10) << s.received
        << std::setw(10) << s.sent << std::setw(9) << s.dropped << std::setw(8) << s.errors
        << std::setw(8) << s.queue_depth << std::setw(11) << std::setprecision(0)
        << s.latency_p50_us << "\n";
  }
  if (checkpoint.is_string())
    out << "checkpoint: " << (fs::path(dir) / checkpoint.get<std::string>()).string()
        << " (continue with kforge run --resume " << dir << ")\n";
  if (leg_versions > 0)
    out << std::setprecision(2)
        << "seconds per step: " << loop_s / static_cast<double>(leg_versions)
        << " (" << leg_versions << " versions in a " << std::setprecision(1) << loop_s
        << " s loop, start-up and shutdown left out)\n";
  if (!groups.empty()) {
    out << "GPU groups (busy = time inside logic calls over the loop; see README):\n";
    for (const auto& g : groups) {
      std::string gpus;
      for (int i : g.gpus) gpus += (gpus.empty() ? "" : ",") + std::to_string(i);
      out << "  " << std::left << std::setw(12) << g.name << std::right << std::setw(10)
          << ("[" + gpus + "]") << "  idle " << std::setw(3) << std::setprecision(0)
          << 100 * g.idle_fraction << "%  busy " << std::setprecision(1) << g.busy_s << " s:";
      for (const auto& st : g.stages)
        out << " " << st.stage << " " << std::setprecision(0)
            << (g.elapsed_s > 0 ? 100 * std::min(1.0, st.busy_s / g.elapsed_s) : 0.0) << "%";
      out << "\n";
    }
  }
  if (const auto line = describe(sandbox_time_of(board)); !line.empty()) out << line << "\n";
  out << "counts in = counts out:\n";
  for (const auto& c : checks)
    out << "  " << (c.ok() ? "ok  " : "FAIL") << " " << c.what << " (" << c.left << " vs "
        << c.right << ")\n";
  if (refills.sent() > 0)
    out << "refill steps: " << refills.sent() << " (the buffer dropped "
        << board.sum("buffer", &wire::StageMetricsT::dropped)
        << " samples; its dropped_* counters in summary.json say why)\n";
  if (const auto infra = board.extra("reward", "status_infra_error"); infra > 0)
    out << infra << " verdict(s) were infra_error, the sandbox's fault, and left unscored; why: "
        << infra_error_log::path_in(dir) << "\n";
  if (unjudged > 0)
    out << "  " << unjudged << " candidate(s) were left unjudged in the sandbox pool at the stop (the "
        << "sandbox was behind the sampler)\n";
  if (!head_error.empty()) err << "kforge run: head: " << head_error << "\n";
  if (!write_failed) err << "kforge run: " << write_failed.message() << "\n";
  // The report reads what was just written (summary.json last). It is a view of the run, not part
  // of it: a failure here is said but leaves the exit code to the run itself.
  if (auto report = write_report(dir); report)
    out << "report: " << *report << "\n";
  else
    err << "kforge run: report not written: " << report.message() << "\n";
  if (code == 0 && !balanced) code = 1;
  return code;
}

}  // namespace kforge::pipeline

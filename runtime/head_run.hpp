#pragma once
// One `kforge run` as the head process runs it, in the phases run_command calls in turn:
//   launch     the head's links, the other local processes, the head's own stages, its files;
//   monitor    heartbeats, metrics in, the progress line, until the steps are done, the time limit,
//              a signal, a lost process, a stage's fatal error, a failed write, or a stall;
//   drain      in-flight work settles (at most 15 s);
//   checkpoint the trainers save the last step (bounded), so the run can go on with --resume;
//   shut_down  every process, then the head's own stages;
//   summarize  summary.json, the console table, the report, and the exit code (run_summary.cpp).

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "bus/channel.hpp"
#include "bus/pubsub.hpp"
#include "common/file_writer.hpp"
#include "config/manifest.hpp"
#include "messages/envelope.hpp"
#include "messages/recording.hpp"
#include "runtime/process_runtime.hpp"
#include "runtime/metrics_endpoint.hpp"
#include "runtime/run_metrics.hpp"
#include "runtime/worker_processes.hpp"

namespace kforge::pipeline {

class head_run {
 public:
  using clock_type = std::chrono::steady_clock;

  /// `m` with its run directory prepared (run_directory.hpp) and `snapshot` written there.
  head_run(manifest m, std::optional<resume_point> resume, std::string snapshot, bool stand_ins,
           std::ostream& out, std::ostream& err);
  /// Stops what a run that ended early left running (its own stages, its workers).
  ~head_run();
  head_run(const head_run&) = delete;
  head_run& operator=(const head_run&) = delete;

  /// The command that starts a process on another node (a launcher's: srun's flags before the
  /// worker's command line; the process's output to the log file given), and where that runs.
  /// Without it launch() asks the user to start such processes by hand.
  struct remote_launcher {
    std::function<std::vector<std::string>(const process_spec&, const std::string& log)> command;
    std::function<std::string(const process_spec&)> where;
  };
  void start_remote_processes_with(remote_launcher l) { remote_ = std::move(l); }

  /// 0 when the run is under way, else the exit code of a run that could not start.
  int launch();
  void monitor();
  void drain();
  void checkpoint();
  void shut_down();
  /// summary.json, the console table, report.html; the run's exit code.
  int summarize();

 private:
  /// Stops the head's own stages (once their runtime exists) and joins their thread, if it runs.
  void stop_head_stages();
  /// The head's sockets (control, metrics, weights) and the Prometheus endpoint; errors are
  /// whole messages.
  status open_links();
  /// Every other process: local ones as `kforge worker`, remote ones through the launcher, or a
  /// line telling the user how to start them; processes.json written.
  status start_workers();
  /// The head's own stages, on a thread of their own.
  void start_head_stages();
  /// metrics.jsonl and, when recorded, the metrics link's recording.
  void open_metrics_outputs();
  void pump_links();
  void reap();
  void publish(wire::ControlCommand command, const std::string& why);
  void draw(bool force);
  /// The scrape endpoint's text, at most once a second ([run] metrics_port).
  void serve_metrics(clock_type::time_point now);
  void note_write(status s);
  /// Whether the loop ends now (steps done, time limit, signal, a failure): sets outcome_ and code_.
  bool should_stop(clock_type::time_point now);
  /// Whether nothing moved for run.stall_timeout_s: sets outcome_ and code_.
  bool stalled(clock_type::time_point now);
  /// Whether a process is still building its stages, or a stage its logic (actors::starting_gauge).
  bool starting() const;
  void refill_if_dry(clock_type::time_point now);
  /// The lowest checkpoint step the trainers report, once every one of them has reported one.
  std::optional<std::uint64_t> reported_checkpoint() const;
  bool trainer_gone() const;
  /// How busy each GPU group was over the loop, as this host resolves the groups.
  std::vector<gpu_group_use> gpu_groups() const;
  /// The policy versions this leg published (a resumed run's earlier legs left out).
  std::uint64_t leg_versions() const noexcept {
    return version_ - std::min(version_, resume_ ? resume_->step : 0);
  }
  nlohmann::json summary_json(bool balanced, const nlohmann::json& checks, std::uint64_t unjudged,
                              const std::vector<gpu_group_use>& groups) const;
  void print_table(const std::vector<balance_check>& checks, std::uint64_t unjudged,
                   const std::vector<gpu_group_use>& groups) const;

  manifest m_;
  std::optional<resume_point> resume_;
  std::string dir_, snapshot_;
  bool stand_ins_;
  std::ostream& out_;
  std::ostream& err_;

  std::optional<bus::publisher> control_;
  std::optional<bus::receiver> metrics_in_;
  std::optional<bus::subscriber> weights_;
  clock_type::time_point started_;
  std::vector<worker_process> children_;
  std::optional<remote_launcher> remote_;
  /// The first file the head failed to write (processes.json, metrics): the loop ends with it,
  /// and a run that cannot keep its results does not report itself completed.
  status write_failed_;

  // The head's own share of the stages, on a thread of its own.
  std::unique_ptr<process_runtime> head_rt_;
  std::atomic<bool> head_ready_{false}, head_done_{false};
  std::string head_error_;
  std::thread head_thread_;

  std::optional<file_writer> metrics_file_;
  std::optional<messages::recording_writer> metrics_recording_;
  metrics_board board_;
  progress_line progress_;
  std::uint64_t version_, heartbeat_seq_ = 0;
  clock_type::time_point next_heartbeat_, last_activity_change_;
  std::uint64_t last_activity_ = 0;
  /// The loop's window, for seconds per step and the GPU groups' idle fractions: from the first
  /// work any stage reports (start-up and model loading left out) to the end of the main loop
  /// (drain and shutdown left out). Seen through metrics, so within a report interval.
  std::optional<clock_type::time_point> work_started_;
  double loop_s_ = 0;
  // Refills (step_driver, process_runtime.cpp): a loop that ran dry short of its steps because
  // the buffer dropped groups gets one more step of requests once the counts have held still.
  refill_policy refills_;
  std::chrono::duration<double> refill_quiet_;

  std::string outcome_;
  std::string stopped_by_;  ///< why a completed run stopped: "steps" or "time_limit_s"
  int code_ = 0;
  std::string lost_;           ///< the first required process that ended before the run did
  bool stage_failed_ = false;  ///< the loop ended on a stage's fatal error
  nlohmann::json checkpoint_;  ///< null: none
  std::string checkpoint_note_;
  std::unique_ptr<metrics_endpoint> scrape_;  ///< null: run.metrics_port is 0
  clock_type::time_point next_scrape_text_{};
  std::map<std::string, std::vector<int>> scrape_gpus_;  ///< the GPU groups as this host resolves them
};

}  // namespace kforge::pipeline

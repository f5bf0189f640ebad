#pragma once
// What the head makes of the stage metrics every process reports: the latest row per stage
// instance, the counts-in = counts-out checks along the pipeline, and the live progress line.
// Plain data over wire::StageMetricsT, so the run command stays a sequence of steps.

#include <chrono>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "messages/envelope.hpp"
#include "config/manifest.hpp"

namespace kforge::pipeline {

/// One metrics row as metrics.jsonl and summary.json write it.
nlohmann::json to_json(const wire::StageMetricsT& m);

/// The latest metrics of every stage instance, keyed by instance name (unique in a topology).
struct metrics_board {
  std::map<std::string, wire::StageMetricsT> latest;
  /// Processes that have exited: their last report stays (its counts happened) but what it says
  /// was queued there is gone with them, so it no longer holds up draining.
  std::set<std::string> gone;
  /// When each process's last row came (heard()). A process silent for `silent_after` — dead on a
  /// node the head did not start it on, or cut off from the head — holds up draining no more than
  /// one that exited, until it reports again: every process reports each 250 ms (its bus row, even
  /// while its stages are busy), and what it held is re-queued elsewhere or counted unjudged.
  std::map<std::string, std::chrono::steady_clock::time_point> last_heard;
  std::chrono::steady_clock::duration silent_after = std::chrono::seconds(5);
  void heard(const std::string& process, std::chrono::steady_clock::time_point at);

  /// `field` summed over the instances of stage kind `kind`.
  std::uint64_t sum(const std::string& kind, std::uint64_t wire::StageMetricsT::*field) const;
  /// The extra counter `name` summed over the instances of `kind`.
  std::uint64_t extra(const std::string& kind, const std::string& name) const;
  /// Whether a stage instance still builds its logic (actors::starting_gauge): nothing it would
  /// move has stalled yet.
  bool starting() const;
  /// Work that moves through the stages; unchanged across an interval means nothing happened.
  /// The bus rows are left out: they count control heartbeats, which never stop.
  std::uint64_t activity() const;
  /// Messages waiting in live processes (the buffer's held samples only if `count_buffer`): not
  /// in those gone, nor in those silent as of `now`.
  std::uint64_t queued(
      bool count_buffer,
      std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now()) const;
  /// The errors the stages could not go on from (actors::fatal_counter: a result the trainer
  /// failed to write), summed over every instance.
  std::uint64_t fatal_errors() const;
  /// Why the first instance (by name) that counts a fatal error failed: its last_error, which
  /// names the instance and the file. Empty when none has.
  std::string failure() const;
};

/// A check that counts along the pipeline balance, for summary.json and the final table.
struct balance_check {
  std::string what;
  std::uint64_t left, right;
  bool ok() const { return left == right; }
};

/// True when the loop has run dry because the buffer dropped groups: the task generator's report
/// shows every group the step driver has released (`released_groups`, so a report from before the
/// latest release does not pass for one after it), every requested group judged whole (its scores
/// are back), the trainer has taken every batch the buffer sent and finished each without error,
/// and the buffer has dropped samples since `dropped_before` (its count at the last refill). Then
/// the buffer holds less than a batch and nothing moves without more requests. A trainer that
/// failed, or a group lost before its scores came back, is not this: that is a stall. The counts
/// come from several processes' reports: act on it only once they have held still (the head
/// waits a second).
bool loop_ran_dry(const metrics_board& b, std::uint64_t released_groups,
                  std::uint64_t dropped_before);

/// The head's side of refills (step_driver, process_runtime.cpp): when one is due. It knows what
/// the driver has released — `lookahead` steps ahead of the policy version from `start_step` up to
/// `steps`, `groups_per_step` groups each, plus the refills — and allows at most max_in_a_row
/// refills without a new version: a policy whose groups are (nearly) all dropped ends in the stall
/// report rather than sampling forever.
class refill_policy {
 public:
  static constexpr std::uint64_t max_in_a_row = 8;

  refill_policy(std::uint64_t groups_per_step, std::uint64_t lookahead, std::uint64_t start_step,
                std::uint64_t steps)
      : groups_(groups_per_step), lookahead_(lookahead), start_(start_step), steps_(steps) {}

  /// True, and counted as sent, when the loop ran dry (loop_ran_dry) at policy `version` and the
  /// limit allows another refill.
  bool due(const metrics_board& b, std::uint64_t version);
  std::uint64_t sent() const { return sent_; }
  std::uint64_t in_a_row() const { return in_a_row_; }

 private:
  std::uint64_t groups_, lookahead_, start_, steps_;
  std::uint64_t sent_ = 0, in_a_row_ = 0, version_ = 0, dropped_at_last_ = 0;
};

/// Candidates still in the sandbox pool (queued, or in a worker's hands) in its last report: at the
/// end of a run, the ones it stopped without judging.
std::uint64_t unjudged_at_stop(const metrics_board& b);

/// The checks, link by link: samplers -> pool -> reward -> buffer -> trainer, the feedback link
/// reward -> task generator (the stages' extra counters "feedback_sent" and "feedback"), and the
/// observations link reward -> samplers of multi-turn episodes ("observations_sent",
/// "observations").
std::vector<balance_check> balance(const metrics_board& b);

/// How busy one [gpu_groups] entry kept its GPUs, from the "busy_us" counters (wall time inside
/// logic calls, actors/stage_metrics.hpp) of the stage instances whose gpu_group it is.
///
/// The definition, kept simple on purpose (README, "Idle GPU groups"): an instance of a kind is one
/// lane of work on the group, so a kind's busy time is the mean over its instances (two samplers
/// busy 50% each keep the group 50% busy). The group's busy time is the sum over the kinds that
/// drive its GPUs, sampler and trainer; sandbox workers are listed but not counted beside them,
/// since most of their time is nvcc on the CPU and timing runs in child processes; they count only
/// in a group that has nothing else. Summing kinds assumes their calls do not overlap (true when
/// rollout and training share a GPU in sync mode; otherwise the idle fraction is a lower bound).
/// What this cannot see: a GPU idling inside a call (host work, waiting on a lock).
struct gpu_group_use {
  struct stage_use {
    std::string stage, kind;
    double busy_s = 0;
  };
  std::string name;
  std::vector<int> gpus;          ///< as resolved on the head's host; empty: CPU only
  std::vector<stage_use> stages;  ///< sampler, sandbox_worker and trainer instances on it
  double busy_s = 0;              ///< by the definition above
  double elapsed_s = 0;           ///< the window it is measured over
  double idle_fraction = 1;       ///< 1 - min(1, busy_s / elapsed_s); 1 when elapsed_s is 0
};

/// Every group of `m` in file order, its GPUs from `gpus` (resolve_gpu_groups; a group missing
/// there keeps its explicit list), over a window of `elapsed_s` seconds.
std::vector<gpu_group_use> gpu_groups_use(const manifest& m,
                                          const std::map<std::string, std::vector<int>>& gpus,
                                          const metrics_board& b, double elapsed_s);
nlohmann::json to_json(const gpu_group_use& g);

/// Where a judged candidate's time went in the sandbox, on average (the nvcc sandbox's counters,
/// stages/sandbox_stage.cpp; candidates are judged side by side, so these add up to a
/// candidate's latency, not to the run's wall time). Zero judged: nothing to say (stand-ins).
struct sandbox_time {
  std::uint64_t judged = 0;  ///< the sandbox's logic calls: every candidate, infra_error included
  double compile_s = 0;   ///< nvcc (a cache hit costs ~0)
  double gpu_wait_s = 0;  ///< waiting for the GPU: behind other runners, a timed trial, or a
                          ///< sampler or trainer holding it
  double verify_s = 0;    ///< expected outputs, loading, running the input sets, comparing
  double timing_s = 0;    ///< the candidate's timed trials and the baseline's
  double other_s = 0;     ///< starting candidate children, unloading
  double profile_s = 0;   ///< Nsight Compute profiles of correct kernels ([sandbox] profile)
  std::uint64_t reused = 0;  ///< of the judged, verdicts copied from a repeat in the same group
  std::uint64_t reused_earlier = 0;  ///< of the judged, verdicts copied from an earlier group of
                                    ///< the same prompt (sandbox.reuse_verdicts = "task")
};
sandbox_time sandbox_time_of(const metrics_board& b);
nlohmann::json to_json(const sandbox_time& t);
/// "sandbox per judged candidate: nvcc 1.20 s, ..." or "" when nothing was judged by the nvcc sandbox.
std::string describe(const sandbox_time& t);

/// The progress line's text: the step, candidates, verdicts with their pass rate and mean reward
/// (over every verdict so far), batches, queued work, sandbox workers, elapsed time, and with a
/// time limit (> 0) the time left.
std::string progress_text(const metrics_board& b, std::uint64_t version, std::int64_t steps,
                          double elapsed_s, double time_limit_s);

/// The live progress line: redrawn in place on a terminal, one line every 5 s otherwise.
class progress_line {
 public:
  explicit progress_line(bool enabled);
  void draw(std::ostream& err, const std::string& text, bool force = false);
  void end(std::ostream& err);

 private:
  bool enabled_, tty_;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace kforge::pipeline

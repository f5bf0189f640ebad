#pragma once
// The sandbox supervisor's run stage: verifying and timing a compiled candidate on a GPU without
// ever touching CUDA itself. It drives two kinds of child (protocol: child_protocol.hpp):
//
//   gpu_slot  one per GPU, shared by that GPU's runners: the reference servers (expected outputs,
//             the eager baseline) and the timing lock, so only one candidate is timed on a GPU at
//             a time (across processes too: an flock on a file named after the GPU). A candidate's
//             requests go to the server its task hashes to, so a GRPO group's expected outputs are
//             computed once, while other tasks' candidates are served by the other servers.
//   runner    one per run worker: its own candidate child, reused across candidates until it
//             crashes, hangs, hits a sticky CUDA error, leaks device memory or has served
//             `recycle_after` candidates; a fresh child is probed with the known-good kernel
//             before it gets a candidate.
//
// For one candidate: the reference server prepares >= 3 input sets (two seeds at the primary
// shapes, then the task's variants); the child runs each with two differently poisoned calls and
// shares its outputs with the server, which compares them; then, holding the timing lock, the
// server's baseline trials and the child's timed trials alternate in rounds (a candidate far slower
// than the baseline is cut short: run_options::slow_cutoff). Timed trials rotate over the two
// primary input sets, copied into the same buffers before each trial, with the outputs poisoned
// before each; the last trial's outputs are compared with the reference afterwards, so a kernel
// that skips work when timed (a valid-looking output, a result cached by pointer, a call count)
// is hack_suspected. Speedups above run_options::confirm_speedup are timed again in a fresh child
// on fresh inputs. Failures of the candidate's process are the candidate's verdict (timeout,
// runtime_error; a protocol violation on its channel or a seccomp kill: hack_suspected); failures
// of the reference server or of a probe are infra_error.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/child_process.hpp"
#include "common/gpu_use_lock.hpp"
#include "common/visible_gpus.hpp"
#include "common/result.hpp"
#include "messages/rollout_generated.h"
#include "sandbox/child_setup.hpp"
#include "sandbox/gpu_facts.hpp"
#include "sandbox/memory_gate.hpp"
#include "sandbox/ncu_report.hpp"
#include "sandbox/scratch_dir.hpp"
#include "sandbox/timing_stats.hpp"
#include "tasks/task.hpp"

namespace kforge::sandbox {

struct run_options {
  /// The kforge executable that serves `sandbox-child` and `sandbox-ref`.
  std::string program;
  /// CUDA ordinal of the GPU (children see only it, as device 0).
  int gpu = 0;
  /// Wall-clock budget of one candidate's verification and timing.
  std::chrono::milliseconds time_limit{20'000};
  /// Budget of a reference server request (compiling a reference, computing expected outputs).
  std::chrono::milliseconds reference_time_limit{120'000};
  /// Reference server processes per GPU (each its own CUDA context and expected-output cache).
  /// One served every runner of the GPU in turn and was the queue verification waited in.
  int reference_servers = 1;
  /// Budget of starting and probing a child.
  std::chrono::milliseconds start_time_limit{120'000};
  /// Variants checked at most (each adds an input set).
  int max_variants = 4;
  /// Timing: `rounds` x (`trials_per_round` candidate trials, then as many baseline trials).
  int rounds = 3;
  int trials_per_round = 10;
  int warmup = 3;
  /// A candidate whose first protocol::slow_trials trials each take longer than slow_cutoff x the
  /// baseline's median is timed in those trials alone, against the first round's baseline trials,
  /// and says so in its reason. The rule is the median of 30 trials; it is bent here for kernels
  /// so slow that their speed term is zero under any alpha >= 1.06 (reward.hpp) and 30 trials
  /// of them held the GPU for minutes: in a held-out eval (2026-12-03) six gemm kernels at ~550 ms
  /// a call (0.01x of eager) took 141 s of the 181 s of timing, and in a run the sampler and
  /// every other candidate wait behind them. 0: every candidate gets every trial.
  double slow_cutoff = 20.0;
  /// Candidates of one GPU run at once only while their estimated footprints (memory_factor x
  /// the task's tasks::primary_bytes: the child's input set and outputs, the reference server's
  /// and the reference's temporaries) sum to at most memory_share of the GPU's memory; one larger
  /// than that runs alone. Why: KernelBench's level-1 problems take 6-7 GiB an input, and four
  /// runners of one GPU verifying them at once ran out of memory (7 of 11 infra_error, H100,
  /// 2026-12-06). Other processes on the GPU are not counted. 0: no limit.
  double memory_share = 0.6;
  double memory_factor = 4.0;
  /// A child serves at most this many candidates.
  int recycle_after = 64;
  /// The known-good library (toolchain.hpp) that probes each fresh child.
  std::string probe_library;
  /// Where scratch directories go; empty: /dev/shm if usable, else the temp directory.
  std::string scratch_root;
  /// Candidate children run confined (child_setup.hpp: namespaces, a read-only root, an
  /// unprivileged user, no_new_privs, seccomp) as far as the host grants; false: none of it.
  bool confine = true;
  /// Speedups above this are flagged for audit in the verdict.
  double audit_speedup = 10.0;
  /// Speedups over eager above this are timed again, in a fresh child, on inputs drawn afresh for
  /// every trial (so no cache of results can hit), and the last trial's outputs checked. The
  /// verdict keeps a timing only if that re-timing confirms it (within confirm_tolerance x the
  /// first median; the slower of the two is reported); otherwise it is ok with no timing, so no
  /// speed reward. 0: never re-timed.
  double confirm_speedup = 5.0;
  int confirm_trials = 10;
  double confirm_tolerance = 1.5;
  /// Child output kept per candidate.
  std::size_t max_output = 4096;
  /// Outputs go from the candidate's child to the reference server as CUDA IPC handles (compared
  /// on the GPU); false: as files through the host (the way before; sandbox_bench --no-ipc
  /// measures the difference). The child falls back to files where IPC fails.
  bool share_outputs = true;
  /// Nsight Compute profiles of candidates judged ok (ncu_profiler.hpp): one call of the kernel
  /// in a child of its own under ncu, holding the GPU as timing does. A profile never changes a
  /// verdict; where none is taken the verdict's profile_skipped says why.
  bool profile = false;
  /// ncu's absolute path (find_ncu); empty with `profile`: none found, and `ncu_missing` says why.
  std::string ncu;
  std::string ncu_missing;
  /// Budget of one profile (starting the child under ncu, the profiled call, ncu's report); a
  /// profile past it is dropped.
  std::chrono::milliseconds profile_time_limit{60'000};
  /// Kernels of the call profiled at most (each is replayed once per group of counters).
  int profile_max_launches = 16;
};

/// What the run stage decided.
struct run_outcome {
  wire::VerdictStatus status = wire::VerdictStatus::infra_error;
  std::string reason;
  double max_abs_error = 0, max_rel_error = 0;
  std::int64_t first_bad_index = -1;
  int checks = 0;  ///< input sets verified
  trial_stats candidate, baseline;
  std::string audit;   ///< non-empty: why a person should look at this kernel
  std::string output;  ///< the candidate's process output (bounded)
  double verify_ms = 0, time_ms = 0;
  /// The Nsight Compute profile of an ok candidate (run_options::profile), or why there is none.
  std::optional<kernel_profile> profile;
  std::string profile_skipped;
  double profile_ms = 0;
};

/// Where the runners' time went, summed over candidates: what bounds a GPU's throughput once
/// compiles are cache hits (sandbox_bench prints it per candidate).
struct run_phases {
  int candidates = 0;
  double gpu_wait_ms = 0;   ///< waiting for the GPU: shared for verifying, exclusive for timing
  double start_ms = 0;      ///< starting and probing fresh candidate children (not the GPU wait)
  double prepare_ms = 0;    ///< reference server: expected outputs (cached per task and seed)
  double load_ms = 0;       ///< the candidate's child loading its library
  double check_ms = 0;      ///< the candidate's child running the input sets
  double compare_ms = 0;    ///< reference server: comparing outputs
  double trials_ms = 0;     ///< the candidate's timed trials, with the two parts below
  double trial_staging_ms = 0;   ///< of trials_ms: the rotation's inputs copied into place, outputs
                                 ///< poisoned, each round's last set drawn, before every call
  double trial_delivery_ms = 0;  ///< of trials_ms: the last trial's outputs handed over
  double confirm_ms = 0;    ///< re-timing a speedup above confirm_speedup in a fresh child (its
                            ///< start, load and compare are counted in those phases)
  double baseline_ms = 0;   ///< the reference server's baseline trials
  double unload_ms = 0;     ///< unloading (and the leak check)
  double profile_ms = 0;    ///< Nsight Compute profiles of ok candidates (their child under ncu,
                            ///< holding the GPU exclusively; waiting for it is gpu_wait_ms)
  int children_started = 0;        ///< fresh children for candidates (not runner::start's)
  int leak_recycles = 0;           ///< children ended because the leak check said so
  /// (children started by runner::start before any candidate are not counted)
  int device_wide_leak_checks = 0; ///< leak checks on the GPU's free memory, not the child's own
  int confirmations = 0;           ///< speedups re-timed (confirm_ms)
  int profiles = 0;                ///< Nsight Compute profiles attempted (profile_ms)
  int expected_releases = 0;       ///< large tasks' expected outputs their reference server let go
                                   ///< of when the candidate was done (larger than its share)
  /// Every time field with its name: the one list that sums, differences and reports walk.
  static const std::vector<std::pair<const char*, double run_phases::*>>& fields();
  /// Every count (children_started and after) with its name, likewise.
  static const std::vector<std::pair<const char*, int run_phases::*>>& counts();
  run_phases& operator+=(const run_phases& o);
  run_phases operator-(const run_phases& o) const;
};

/// The reference server and timing lock of one GPU.
class gpu_slot {
 public:
  explicit gpu_slot(run_options options);
  ~gpu_slot();
  gpu_slot(const gpu_slot&) = delete;
  gpu_slot& operator=(const gpu_slot&) = delete;
  const run_options& options() const { return options_; }
  /// The GPU's facts (starts the first server if needed).
  result<gpu_facts> facts();
  /// One request to reference server `route` modulo their number (restarted once if it died).
  /// Its ok reply, or why not (the server's reason, a timeout, a server that keeps dying).
  result<nlohmann::json> reference(const nlohmann::json& request, std::uint64_t route = 0);
  /// Starts every reference server not running yet (in parallel). The first error, if any.
  status start_servers();
  /// The runners' phase times so far (run_phases).
  run_phases phases() const;
  void add_phases(const run_phases& p);
  /// Why ncu may not profile on this host, once a profile found out (its counters restricted to
  /// administrators): later candidates are not profiled. Empty while profiling is allowed.
  std::string profiling_denied() const;
  void deny_profiling(const std::string& why);
  /// Candidates' claims on the GPU's memory (run_options::memory_share), each held for a whole
  /// run. Its budget comes with a reference server's hello: the first server is started here if
  /// none has answered yet (a slot whose servers cannot start leaves it unlimited).
  memory_gate& memory();
  /// Use of the GPU, in this process and across processes (an flock per physical GPU). Any
  /// number of runners may verify at once (shared); timing is exclusive, because GPU contexts
  /// time-slice: another process's kernels would stretch both the events and the wall time of a
  /// timed trial. A runner that wants to time stops new shared users from entering, so timing is
  /// not starved by a stream of verifications.
  class gpu_lock {
   public:
    gpu_lock(gpu_slot& s, bool exclusive);
    ~gpu_lock();
    gpu_lock(const gpu_lock&) = delete;
    gpu_lock& operator=(const gpu_lock&) = delete;

   private:
    gpu_slot& slot_;
    bool exclusive_;
    std::optional<gpu_use_lock> host_;  // across the host's processes
  };

 private:
  struct server {
    std::mutex mutex;  ///< one request at a time
    child_process child;
    std::shared_ptr<scratch_dir> scratch;
    std::string facts_json;  ///< from its hello
  };
  status start_locked(server& s);
  run_options options_;
  std::vector<std::unique_ptr<server>> servers_;
  std::mutex gate_;           ///< taken briefly by everyone; held by a timer while it waits
  std::shared_mutex use_;     ///< shared: verifying; exclusive: timing
  mutable std::mutex phases_mutex_;
  run_phases phases_;
  std::string profiling_denied_;  ///< under phases_mutex_
  memory_gate memory_;
  std::atomic<bool> memory_budget_set_{false};
};

class candidate_run;

class runner {
 public:
  explicit runner(std::shared_ptr<gpu_slot> slot);
  ~runner();
  runner(const runner&) = delete;
  runner& operator=(const runner&) = delete;
  /// Starts (and probes) the candidate child now, not with the first candidate.
  status start();
  /// Verifies and times `library` (a compiled candidate of `t`) with inputs drawn from `seed`.
  run_outcome run(const tasks::task& t, const std::string& library, std::uint64_t seed);

 private:
  friend class candidate_run;
  /// Starts and probes a fresh child where needed (always with `fresh`): whether it did, or why
  /// it failed. Waiting for the GPU to probe is added to `gpu_wait_ms`.
  result<bool> ensure_child(double& gpu_wait_ms, bool fresh = false);
  std::shared_ptr<gpu_slot> slot_;
  child_process child_;
  int served_ = 0;
  std::optional<candidate_scratch> scratch_;
  int staged_ = 0;  ///< libraries staged so far (each copy gets a name of its own)
};

// common/visible_gpus.hpp, under the names the sandbox has always used.
using ::kforge::physical_gpu;
using ::kforge::visible_gpu_count;


/// The input sets checked for a task and seed: (seed, variant) pairs, >= 3.
struct check_spec {
  std::uint64_t seed = 0;
  int variant = -1;  ///< -1: primary shapes
};
std::vector<check_spec> plan_checks(const tasks::task& t, std::uint64_t seed, int max_variants);

}  // namespace kforge::sandbox

#pragma once
// The trainer's data-parallel ranks as processes (trainer.ranks = "processes"): the trainer's own
// process is rank 0, and it starts ranks 1..L-1 as `kforge trainer-rank` children on its host, one
// per GPU of the trainer's group (or per CPU rank), and drives them over a private JSON-line channel
// (common/child_process.hpp: a child dies with its parent's handle, never orphaned). Ranks
// L..L+R-1 (trainer.remote_ranks) are `kforge trainer-rank --connect` processes on other hosts: they
// connect to a ZeroMQ socket rank 0 listens on (trainer.rank_endpoint), say hello with their device,
// and get the same requests there (numbered, so a late reply is never taken for a later request).
// The requests:
//
//   join  {rank, size, device, manifest, run_dir, resume_from, collective: "socket"|"nccl",
//          endpoint | nccl_id}  -> the child builds its trainer from the same manifest, joins the
//          group (which completes when rank 0 joins too) and loads the checkpoint to resume from.
//   step  {batch: hex of the TrainBatch FlatBuffer} -> one step on its share; {step, version}.
//   save_shard {dir} -> with trainer.shard_optimizer, its optimiser shard into the checkpoint
//          directory rank 0 is writing (a remote rank needs that path on a shared file system).
//   stop  -> it exits.
//
// Every rank steps on every batch (grpo_stepper takes each rank's share) and the gradients are
// summed over the group, so the ranks' weights stay identical and rank 0 publishes and checkpoints
// for all. A child that fails, dies or does not answer in time fails the step with its rank named,
// and the group is broken from then on (the ranks' weights may differ): every later step fails at
// once. failed() turns true as soon as a child has failed, so rank 0's side of a socket group can
// stop waiting for it (give_up of trainer/socket_group.hpp and trainer/nccl_group.hpp: an NCCL
// group is then aborted, which ends rank 0's kernels still waiting for the dead rank).
// Torch-free: the child's side is trainer_rank_main (policy_trainer_stage.hpp).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/child_process.hpp"
#include "common/result.hpp"

namespace kforge::pipeline {

struct rank_processes_options {
  /// The kforge executable (`PROGRAM trainer-rank`).
  std::string program;
  /// The run's manifest text and directory: every rank builds its trainer from them.
  std::string manifest_text;
  std::string run_dir;
  /// A checkpoint every rank loads after joining; empty: none.
  std::string resume_from;
  /// One entry per rank (rank r on devices[r]): CUDA ordinals, or -1 for CPU ranks.
  std::vector<int> devices;
  /// How the group sums: "socket" (CPU ranks, trainer/socket_group.hpp) at `endpoint`, or "nccl"
  /// with `nccl_id` (hex of the unique id rank 0 made).
  std::string collective;
  std::string endpoint;
  std::string nccl_id;
  /// Ranks joining from other hosts (after the local ones) and where rank 0 waits for them
  /// (tcp://HOST:PORT, bound on the interface HOST names).
  int remote = 0;
  std::string remote_endpoint;
  /// Joining (loading the model) and one step may each take at most this long.
  std::chrono::milliseconds join_timeout{std::chrono::minutes(10)};
  std::chrono::milliseconds step_timeout{std::chrono::minutes(30)};
};

class rank_processes {
 public:
  /// Starts ranks 1..L-1, waits (join_timeout) until the R remote ranks have said hello, and sends
  /// every rank its join request; returns without waiting for the joins (they complete only once
  /// this process joins the group as rank 0: then call joined()).
  static result<std::unique_ptr<rank_processes>> start(const rank_processes_options& o);
  /// Stops the children (a stop request, then their process groups are killed).
  ~rank_processes();
  rank_processes(const rank_processes&) = delete;
  rank_processes& operator=(const rank_processes&) = delete;

  /// Waits for every child's join reply; each child must be at step `steps` (rank 0's, after a
  /// resume). The first failure, rank named.
  status joined(std::int64_t steps);
  /// Whether a child has failed (died, refused, answered late) in the current request, as a
  /// function any thread may call while a join or step is under way, also after this object is
  /// gone (then it says false): for rank 0's group (give_up).
  std::function<bool()> failed() const {
    return [f = failed_] { return f->load(); };
  }
  /// The failures among the replies already in, rank named ("" if none), without waiting for the
  /// rest: why rank 0 could not join, when a child failed first.
  std::string failures_so_far() const;
  /// One step: `batch` (TrainBatch FlatBuffer bytes) to every child, then `local` (rank 0's step)
  /// on this thread, then every child's reply, whose step must equal `local_step()` afterwards.
  status step(const std::vector<std::uint8_t>& batch, const std::function<status()>& local,
              const std::function<std::int64_t()>& local_step);
  /// Every child writes its optimiser shard into `dir` (save_shard) and must then be at `steps`;
  /// the first failure, rank named. A failure leaves the ranks' weights alone (not broken).
  status save_shards(const std::string& dir, std::int64_t steps);
  int size() const noexcept { return static_cast<int>(replies_.size()) + 1; }
  /// "rank 1: pid 123 on cpu, rank 2: ..." for the log.
  std::string describe() const;

 private:
  struct remote_link;  ///< the ZeroMQ socket of the remote ranks (trainer_ranks.cpp)
  explicit rank_processes(rank_processes_options o);
  /// Sends `request` to local child i on a thread of its own that waits for the reply (and notes a
  /// failure).
  void send_one(std::size_t i, std::shared_ptr<const std::string> request, std::chrono::milliseconds timeout);
  /// Sends remote rank j its request (numbered `number`), all of them from one thread (the
  /// socket's), which waits for their replies.
  void send_remote(std::vector<std::string> requests, std::int64_t number, std::chrono::milliseconds timeout);
  /// The same request to every rank, numbered.
  void send_all(nlohmann::json request, std::chrono::milliseconds timeout);
  /// Rank r's device (-1: the CPU).
  int device_of(std::size_t rank) const;
  /// Joins those threads; the first failed reply, its rank named.
  status collect(const char* what);

  /// Every child's reply must be ok with "steps" == `steps`: the first failure, rank named.
  status check_steps(std::int64_t steps) const;

  rank_processes_options o_;
  std::vector<child_process> children_;
  std::vector<pid_t> pids_;               ///< the children's process groups, for ending them
  std::shared_ptr<std::atomic<bool>> failed_ = std::make_shared<std::atomic<bool>>(false);
  std::unique_ptr<std::atomic<bool>[]> done_;  ///< replies_[i] of the current request is in
  bool broken_ = false;                   ///< a step failed: the ranks may differ from now on
  std::int64_t seq_ = 0;                  ///< requests sent (each carries its number; replies echo it)
  std::vector<child_reply> replies_;  ///< replies_[r - 1]: rank r's (local children first)
  std::vector<std::thread> threads_;
  std::unique_ptr<remote_link> remote_;
};

}  // namespace kforge::pipeline

#pragma once
// The pluggable logic behind each stage actor. Plain C++ with no CAF in it: the real components
// (prompt building, the LibTorch engine, the nvcc sandbox, the reward formula, GRPO) implement
// these interfaces in their own folders, and tests use small fakes. An actor calls its logic one
// input at a time, never concurrently, so implementations need no locking of their own.
//
// Inputs are verified FlatBuffers tables, valid for the duration of the call only (copy what you
// keep). Outputs are object-API structs; the actor packs them into envelopes and fills the header:
// sender, a per-sender message id, the propagated sample id and the policy version. Failures are
// returned as values; an exception that escapes is caught by the actor and counted as an error.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.hpp"
#include "messages/envelope.hpp"

namespace kforge::actors {

namespace wire = ::kforge::wire;

/// The header of the envelope an input arrived in. `sender` points into the envelope: copy it to
/// keep it beyond the call.
struct envelope_info {
  std::uint64_t message_id = 0;
  std::uint64_t sample_id = 0;
  std::string_view sender;
  std::int64_t send_time_ns = 0;
  std::uint64_t policy_version = 0;

  static envelope_info of(const wire::Envelope& e) noexcept {
    envelope_info i;
    i.message_id = e.message_id();
    i.sample_id = e.sample_id();
    if (const auto* s = e.sender()) i.sender = std::string_view(s->c_str(), s->size());
    i.send_time_ns = e.send_time_ns();
    i.policy_version = e.policy_version();
    return i;
  }
};

/// Task generator: owns the task pool and turns a trainer step into generation requests.
class task_source {
 public:
  virtual ~task_source() = default;
  /// The requests (one per GRPO group) for trainer step `step`; empty when there is nothing to do.
  virtual result<std::vector<wire::GenerateRequestT>> next(std::uint64_t step) = 0;
  /// A task arriving from elsewhere (a synthesizer, a bus bridge) to join the pool.
  virtual status add_task(const wire::Task& task, const envelope_info& info) {
    return error{"this task source does not accept tasks from outside (task \"" +
                 (task.id() ? task.id()->str() : std::string()) + "\")"};
  }
  /// One scored sample fed back from the reward (the feedback link), for a curriculum. A source
  /// without one has nothing to learn from it: the default accepts and ignores it.
  virtual status observe(const wire::Scored&, const envelope_info&) { return {}; }
};

/// Sampler: a prompt in, a group of completions out, with the policy at the version it holds.
class sampler_logic {
 public:
  virtual ~sampler_logic() = default;
  /// The group of candidates for one request (request.group_size() of them, normally). The actor
  /// sets each candidate's group_id (the request's sample id), group_index and group_size.
  virtual result<std::vector<wire::CandidateT>> generate(const wire::GenerateRequest& request,
                                                         const envelope_info& info) = 0;
  /// One request of a batch: the request and the header it came in.
  struct request_item {
    const wire::GenerateRequest* request = nullptr;
    envelope_info info;
  };
  /// Requests that arrived together, answered in one go: an engine generates them as one batch,
  /// which keeps a GPU far busier than one group at a time. One result per request, in order; each
  /// must equal what generate() gives for it alone. The default calls generate() for each.
  virtual std::vector<result<std::vector<wire::CandidateT>>> generate_batch(
      const std::vector<request_item>& requests) {
    std::vector<result<std::vector<wire::CandidateT>>> out;
    out.reserve(requests.size());
    for (const auto& r : requests) out.push_back(generate(*r.request, r.info));
    return out;
  }
  /// The most requests generate_batch takes at once (>= 1); 1: one at a time.
  virtual std::size_t max_batch() const { return 1; }
  /// The most observations next_turns takes at once (>= 1). A turn is one sequence where a request
  /// is a whole group, so an engine takes a group's worth of turns per request it would batch.
  virtual std::size_t max_turn_batch() const { return max_batch(); }
  /// One observation of a turn whose episode goes on, and the header it came in.
  struct turn_item {
    const wire::Scored* observed = nullptr;
    envelope_info info;
  };
  /// The next turn of each observed episode (agent/episode_turns.hpp), generated together: one
  /// result per item, in order. The default refuses: such a sampler runs single-shot episodes only.
  virtual std::vector<result<wire::CandidateT>> next_turns(const std::vector<turn_item>& turns) {
    return std::vector<result<wire::CandidateT>>(
        turns.size(), error{"this sampler generates no later turns of episodes ([agent] max_turns > 1)"});
  }
  /// What generate_together gives: one result per request and one per turn, in order.
  struct batch_results {
    std::vector<result<std::vector<wire::CandidateT>>> groups;
    std::vector<result<wire::CandidateT>> turns;
  };
  /// Whether generate_together is worth calling now: an engine decoding both kinds in one batch
  /// (a small model's decoding call takes as long as its longest sequence whatever its rows, so two
  /// calls take about twice as long). Otherwise the actor calls next_turns and generate_batch,
  /// each on its own, and sends the turns on before the groups are generated.
  virtual bool generates_together() const { return false; }
  /// Requests and episodes' next turns waiting at the same time, answered in one go. Each result
  /// must equal what generate_batch or next_turns gives for it (up to the rounding of batched
  /// arithmetic). The default calls next_turns and then generate_batch.
  virtual batch_results generate_together(const std::vector<request_item>& requests,
                                          const std::vector<turn_item>& turns) {
    batch_results out;
    if (!turns.empty()) out.turns = next_turns(turns);
    if (!requests.empty()) out.groups = generate_batch(requests);
    return out;
  }
  /// Counters since the last call (deltas, as reward_logic::take_counters), added to the stage's
  /// extra metrics after every batch: an engine's joint calls of groups and turns, say.
  virtual std::vector<std::pair<std::string, std::uint64_t>> take_counters() { return {}; }
  /// Switch to new weights. Only when this succeeds does the actor tag later candidates with
  /// weights.version(); on failure it keeps the old version and counts the error.
  virtual status set_weights(const wire::PolicyWeights& weights) = 0;
  /// Early word of new weights: the process's message pump calls this as soon as a weights
  /// message arrives, before the actor (busy generating) gets to set_weights. Called from the pump
  /// thread: it must be thread-safe and return at once. An NCCL receiver starts receiving here.
  virtual void weights_arrived(const wire::PolicyWeights& /*weights*/) {}
  /// The process is stopping: any wait for weights must end now (with an error). Called from the
  /// pump thread, before the actors are stopped.
  virtual void shutting_down() {}
};

/// Sandbox pool: compile, verify and time one candidate.
class sandbox_logic {
 public:
  virtual ~sandbox_logic() = default;
  /// The verdict for `candidate`. A fault of the sandbox itself is a verdict (infra_error), not an
  /// error; an error here means the candidate could not be handled at all.
  virtual result<wire::VerdictT> evaluate(const wire::Candidate& candidate,
                                          const envelope_info& info) = 0;
  /// Where the sandbox's time went since the last call (deltas, as reward_logic::take_counters),
  /// added to the stage's extra metrics after every verdict. Thread-safe: one logic may serve
  /// several worker threads, each taking what accrued since any of them last asked.
  virtual std::vector<std::pair<std::string, std::uint64_t>> take_counters() { return {}; }
};

/// Reward: a verdict to a scalar.
class reward_logic {
 public:
  virtual ~reward_logic() = default;
  /// The scored sample, or nullopt to drop it (an infra_error verdict is never a reward); the
  /// actor counts drops.
  virtual result<std::optional<wire::ScoredT>> score(const wire::Verdict& verdict,
                                                     const envelope_info& info) = 0;
  /// Whether the scored turn's episode goes on: then the actor sends it to a sampler as the
  /// observation of the next turn, not to the buffer (agent/episode_turns.hpp). Single shot: never.
  virtual bool goes_on(const wire::ScoredT& /*scored*/) const { return false; }
  /// Makes a turn that does not go on (its episode's last, or any once the run drains) the
  /// episode's sample: the episode's reward over its turns. Nothing for a single-shot sample.
  virtual void end_episode(wire::ScoredT& /*scored*/) const {}
  /// What the logic counted since the last call (verdicts per status, speedup buckets, ...), as
  /// (name, amount) pairs the actor adds to its extra metrics after every score call. Deltas, not
  /// totals, so the actor's stage_core stays the one owner of the cumulative counts.
  virtual std::vector<std::pair<std::string, std::uint64_t>> take_counters() { return {}; }
};

/// What a buffer push produced: whole batches ready for the trainer, and how many samples were
/// dropped (the pushed one as a duplicate or stale, or older ones that went stale meanwhile).
struct buffer_output {
  std::vector<wire::TrainBatchT> batches;
  std::uint64_t dropped = 0;
};

/// Buffer: dedup, staleness, whole GRPO groups to the trainer.
class buffer_logic {
 public:
  virtual ~buffer_logic() = default;
  virtual result<buffer_output> push(const wire::Scored& scored, const envelope_info& info) = 0;
  /// The trainer published `version`: returns how many held samples went stale and were dropped.
  virtual std::uint64_t set_policy_version(std::uint64_t version) { return 0; }
  /// Samples held waiting for their group or batch (reported as queue depth).
  virtual std::uint64_t pending() const { return 0; }
  /// Why samples were dropped since the last call, as (name, amount) pairs the actor adds to its
  /// extra metrics after every push and version change (deltas, as reward_logic::take_counters).
  virtual std::vector<std::pair<std::string, std::uint64_t>> take_counters() { return {}; }
};

/// Trainer: one GRPO step on a batch, producing the next policy version.
class trainer_logic {
 public:
  virtual ~trainer_logic() = default;
  virtual result<wire::PolicyWeightsT> train(const wire::TrainBatch& batch,
                                             const envelope_info& info) = 0;
  /// Saves what a resumed run needs to go on from the current step: the run asks for it when it
  /// stops, so an interrupted run loses no trained step. Asking again with no step in between must
  /// be cheap (the head repeats the command until every trainer reports). Default: a logic with no
  /// state worth keeping (the stand-in) has nothing to do.
  virtual status checkpoint() { return {}; }
  /// The step of the last complete checkpoint this logic wrote, periodic or asked for; nullopt when
  /// it writes none. The actor reports it as the extra counter "checkpoint_step".
  virtual std::optional<std::uint64_t> checkpoint_step() const { return std::nullopt; }
  /// The first of this logic's results (its log, published weights, a checkpoint) that it failed
  /// to write during the last train() or checkpoint() call, or success; asking clears it. Such a
  /// failure is fatal to the run (the actor counts it as the stage's fatal error): a run that
  /// cannot keep what it trains must not go on as if it did. Other failures of a call stay
  /// ordinary errors. Default: a logic that writes nothing.
  virtual status take_write_failure() { return {}; }
};

}  // namespace kforge::actors

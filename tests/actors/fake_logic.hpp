#pragma once
// Small fakes behind the stage logic interfaces: deterministic, recording what they saw, and able
// to fail or throw on chosen inputs. The test coordinator runs every actor on the test's thread, so
// the test reads these records directly after sched.run().

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "actors/logic_interfaces.hpp"
#include "common/hash.hpp"

namespace kforge::actors::testing {

/// What a stage saw of one input: the header it arrived with and the key of its payload.
struct seen {
  std::uint64_t message_id = 0;
  std::uint64_t sample_id = 0;
  std::string sender;
  std::uint64_t policy_version = 0;
  std::uint64_t key = 0;  ///< code hash (candidates, verdicts, scored), step (batches), ...
};

inline seen record(const envelope_info& info, std::uint64_t key) {
  return {info.message_id, info.sample_id, std::string(info.sender), info.policy_version, key};
}

/// `requests_per_step` prompts a step, each asking for `group_size` completions.
class fake_task_source : public task_source {
 public:
  fake_task_source(std::uint32_t requests_per_step, std::uint32_t group_size)
      : per_step_(requests_per_step), group_size_(group_size) {}

  result<std::vector<wire::GenerateRequestT>> next(std::uint64_t step) override {
    std::vector<wire::GenerateRequestT> out(per_step_);
    for (std::uint32_t i = 0; i < per_step_; ++i) {
      out[i].prompt = "step " + std::to_string(step) + " prompt " + std::to_string(i);
      out[i].prompt_hash = fnv1a64(out[i].prompt);
      out[i].group_size = group_size_;
      out[i].step = step;
    }
    return out;
  }

  status add_task(const wire::Task& task, const envelope_info&) override {
    tasks.push_back(task.id() ? task.id()->str() : std::string());
    return status::success();
  }

  /// Records the feedback (key: the candidate's code hash); refuses a reward of -1.
  status observe(const wire::Scored& scored, const envelope_info& info) override {
    const auto* c = scored.verdict() ? scored.verdict()->candidate() : nullptr;
    observed.push_back(record(info, c ? c->code_hash() : 0));
    if (scored.reward() == -1) return error{"no such task"};
    return status::success();
  }

  std::vector<std::string> tasks;
  std::vector<seen> observed;

 private:
  std::uint32_t per_step_;
  std::uint32_t group_size_;
};

/// request.group_size() candidates whose code hash is derived from the prompt and the index.
class fake_sampler : public sampler_logic {
 public:
  result<std::vector<wire::CandidateT>> generate(const wire::GenerateRequest& request,
                                                 const envelope_info& info) override {
    requests.push_back(record(info, request.prompt_hash()));
    std::vector<wire::CandidateT> out(request.group_size());
    for (std::uint32_t i = 0; i < out.size(); ++i) {
      out[i].prompt_hash = request.prompt_hash();
      out[i].code_hash = request.prompt_hash() * 31 + i + 1;
      out[i].source = "// kernel " + std::to_string(i) + "\n";
    }
    return out;
  }

  std::vector<result<std::vector<wire::CandidateT>>> generate_batch(
      const std::vector<request_item>& items) override {
    batch_sizes.push_back(items.size());
    return sampler_logic::generate_batch(items);
  }
  std::size_t max_batch() const override { return max_batch_requests; }
  std::size_t max_turn_batch() const override { return max_turn_batch_size; }
  /// A next turn per observation: a candidate whose code hash is the observed one's + 1.
  std::vector<result<wire::CandidateT>> next_turns(const std::vector<turn_item>& turns) override {
    turn_batch_sizes.push_back(turns.size());
    std::vector<result<wire::CandidateT>> out;
    for (const auto& t : turns) {
      wire::CandidateT c;
      const auto* v = t.observed->verdict();
      c.code_hash = v && v->candidate() ? v->candidate()->code_hash() + 1 : 0;
      out.emplace_back(std::move(c));
    }
    return out;
  }

  bool generates_together() const override { return together; }
  batch_results generate_together(const std::vector<request_item>& requests,
                                  const std::vector<turn_item>& turns) override {
    together_sizes.emplace_back(requests.size(), turns.size());
    if (throw_together) throw std::runtime_error("joint batch failed");
    return sampler_logic::generate_together(requests, turns);
  }

  status set_weights(const wire::PolicyWeights& weights) override {
    if (refuse_versions.count(weights.version()) != 0)
      return error{"weights file v" + std::to_string(weights.version()) + " is corrupt"};
    loaded.push_back(weights.version());
    return status::success();
  }

  std::vector<seen> requests;
  std::vector<std::uint64_t> loaded;
  std::set<std::uint64_t> refuse_versions;
  std::size_t max_batch_requests = 1;
  std::vector<std::size_t> batch_sizes;  ///< requests per generate_batch call
  std::size_t max_turn_batch_size = 1;
  std::vector<std::size_t> turn_batch_sizes;  ///< observations per next_turns call
  /// (requests, observations) per generate_together call: one call of the logic each flush
  std::vector<std::pair<std::size_t, std::size_t>> together_sizes;
  bool together = true;         ///< generates_together()
  bool throw_together = false;  ///< generate_together throws (after recording its sizes)
};

/// An `ok` verdict for every candidate, except chosen code hashes that fail or throw.
class fake_sandbox : public sandbox_logic {
 public:
  result<wire::VerdictT> evaluate(const wire::Candidate& candidate,
                                  const envelope_info& info) override {
    candidates.push_back(record(info, candidate.code_hash()));
    if (fail_hashes.count(candidate.code_hash()) != 0)
      return error{"cannot schedule candidate " + std::to_string(candidate.code_hash())};
    if (throw_hashes.count(candidate.code_hash()) != 0)
      throw std::runtime_error("sandbox fake exploded");
    wire::VerdictT v;
    v.candidate.reset(candidate.UnPack());
    v.status = wire::VerdictStatus::ok;
    v.worker = "fake";
    return v;
  }

  std::vector<seen> candidates;
  std::set<std::uint64_t> fail_hashes;
  std::set<std::uint64_t> throw_hashes;
};

/// Reward 1 for `ok`, a drop for infra_error.
class fake_reward : public reward_logic {
 public:
  result<std::optional<wire::ScoredT>> score(const wire::Verdict& verdict,
                                             const envelope_info& info) override {
    verdicts.push_back(record(info, verdict.candidate()->code_hash()));
    if (verdict.status() == wire::VerdictStatus::infra_error) return std::optional<wire::ScoredT>{};
    wire::ScoredT s;
    s.verdict.reset(verdict.UnPack());
    s.reward = verdict.status() == wire::VerdictStatus::ok ? 1.0 : 0.0;
    return std::optional<wire::ScoredT>(std::move(s));
  }

  std::vector<seen> verdicts;
};

/// Collects samples by group id and emits a one-group batch when a group is complete.
class fake_buffer : public buffer_logic {
 public:
  result<buffer_output> push(const wire::Scored& scored, const envelope_info& info) override {
    const auto* c = scored.verdict()->candidate();
    scored_seen.push_back(record(info, c->code_hash()));
    auto& group = groups_[c->group_id()];
    group.emplace_back(scored.UnPack());  // UnPack returns an owning pointer
    buffer_output out;
    if (group.size() == c->group_size()) {
      wire::TrainBatchT batch;
      batch.step = next_step_++;
      auto g = std::make_unique<wire::SampleGroupT>();
      g->prompt_hash = c->prompt_hash();
      g->group_id = c->group_id();
      for (auto& s : group) g->samples.push_back(std::move(s));
      batch.groups.push_back(std::move(g));
      out.batches.push_back(std::move(batch));
      groups_.erase(c->group_id());
    }
    return out;
  }

  std::uint64_t set_policy_version(std::uint64_t version) override {
    versions.push_back(version);
    return 0;
  }

  std::uint64_t pending() const override {
    std::uint64_t n = 0;
    for (const auto& [id, g] : groups_) n += g.size();
    return n;
  }

  std::vector<seen> scored_seen;
  std::vector<std::uint64_t> versions;

 private:
  std::map<std::uint64_t, std::vector<std::unique_ptr<wire::ScoredT>>> groups_;
  std::uint64_t next_step_ = 0;
};

/// Each batch makes the next policy version.
class fake_trainer : public trainer_logic {
 public:
  result<wire::PolicyWeightsT> train(const wire::TrainBatch& batch,
                                     const envelope_info& info) override {
    batches.push_back(record(info, batch.step()));
    wire::PolicyWeightsT w;
    w.version = ++version_;
    w.transport = wire::WeightsTransport::file;
    w.path = "weights/v" + std::to_string(w.version) + ".safetensors";
    return w;
  }

  /// "Saves" the current version; none is kept until the first call.
  status checkpoint() override {
    ++checkpoint_calls;
    if (fail_checkpoint) return error{"disk full"};
    saved_ = version_;
    return {};
  }
  std::optional<std::uint64_t> checkpoint_step() const override { return saved_; }
  status take_write_failure() override {
    if (!unwritten) return {};
    return error{*std::exchange(unwritten, std::nullopt)};
  }

  std::vector<seen> batches;
  int checkpoint_calls = 0;
  bool fail_checkpoint = false;
  /// A result the next call "fails to write": take_write_failure reports it once.
  std::optional<std::string> unwritten;

 private:
  std::uint64_t version_ = 0;
  std::optional<std::uint64_t> saved_;
};

}  // namespace kforge::actors::testing

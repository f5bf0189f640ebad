#pragma once
// Builders for verdicts and scored samples used by the reward and buffer tests.

#include <memory>
#include <string>

#include "messages/envelope.hpp"

namespace kforge::test {

namespace wire = ::kforge::wire;

inline std::unique_ptr<wire::CandidateT> candidate(const std::string& task, std::uint64_t group,
                                                   std::uint32_t index, std::uint32_t size,
                                                   std::uint64_t code_hash) {
  auto c = std::make_unique<wire::CandidateT>();
  c->task = std::make_unique<wire::TaskT>();
  c->task->id = task;
  c->prompt_hash = 1000 + group;
  c->code_hash = code_hash;
  c->group_id = group;
  c->group_index = index;
  c->group_size = size;
  return c;
}

/// A packed verdict; gen_ms/ref_ms <= 0 leave the timing out.
inline messages::envelope verdict(const std::string& task, wire::VerdictStatus st, double gen_ms,
                                  double ref_ms, std::uint64_t group = 0, std::uint32_t index = 0,
                                  std::uint32_t size = 1, std::uint64_t code_hash = 0) {
  wire::VerdictT v;
  v.candidate = candidate(task, group, index, size, code_hash ? code_hash : 1 + index);
  v.status = st;
  v.reason = st == wire::VerdictStatus::infra_error ? "GPU lost" : "";
  if (gen_ms > 0) {
    v.candidate_timing = std::make_unique<wire::TimingT>();
    v.candidate_timing->median_ms = gen_ms;
  }
  if (ref_ms > 0) {
    v.baseline_timing = std::make_unique<wire::TimingT>();
    v.baseline_timing->median_ms = ref_ms;
  }
  return messages::pack(messages::header{}, v);
}

/// A packed scored sample of group `group`; its prompt hash is 1000 + group unless given (two
/// groups of one prompt, as at two steps of a run).
inline messages::envelope scored(std::uint64_t group, std::uint32_t index, std::uint32_t size,
                                 std::uint64_t code_hash, double reward,
                                 const std::string& excluded = "", std::uint64_t prompt_hash = 0) {
  wire::ScoredT s;
  s.verdict = std::make_unique<wire::VerdictT>();
  s.verdict->candidate = candidate("t", group, index, size, code_hash);
  if (prompt_hash) s.verdict->candidate->prompt_hash = prompt_hash;
  s.reward = reward;
  s.excluded = excluded;
  return messages::pack(messages::header{}, s);
}

}  // namespace kforge::test

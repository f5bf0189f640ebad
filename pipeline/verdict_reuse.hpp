#pragma once
// Judging a GRPO group's repeated kernels once. A small policy at T = 0.8 often writes the same
// kernel more than once in a group of G (session 14: 106 of 384 samples repeated one of their own
// group), and every member of a group is checked on the same input sets (sandbox_stage.hpp), so a
// repeat's compile, verification and timing would only measure the same code on the same inputs
// again: seconds of GPU time that the timed trials, one at a time, cannot spare (session 16:
// timing took 177 s of a 265 s loop). The buffer drops such repeats anyway (buffer.dedup).
//
// The first candidate with a given (group, source) is judged; an identical one arriving while it
// is judged waits for that verdict; either way the copy carries its own candidate, reused = true
// and zero compile/verify/time milliseconds. A verdict that is an infra_error (the sandbox's
// fault) or a failed evaluation is not reused: the repeat is judged itself. Candidates of other
// groups are always judged on their own, fresh inputs.
#include <cstdint>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "actors/stage_logic.hpp"

namespace kforge::pipeline {

class group_verdict_reuse final : public actors::sandbox_logic {
 public:
  /// Reuses within each of the last `max_groups` groups seen (older groups are forgotten: a
  /// group's members arrive within one generate call).
  explicit group_verdict_reuse(std::shared_ptr<actors::sandbox_logic> inner,
                               std::size_t max_groups = 512);

  result<wire::VerdictT> evaluate(const wire::Candidate& c,
                                  const actors::envelope_info& info) override;
  /// The inner logic's counters, and reused_verdicts: verdicts copied since the last call.
  std::vector<std::pair<std::string, std::uint64_t>> take_counters() override;

 private:
  using verdict_future = std::shared_future<result<wire::VerdictT>>;
  using key = std::pair<std::uint64_t, std::string>;  // group id, source
  void forget(const key& k);

  std::shared_ptr<actors::sandbox_logic> inner_;
  std::size_t max_groups_;
  std::mutex mu_;
  std::map<key, verdict_future> seen_;
  std::deque<std::uint64_t> groups_;  // in order of first sight, for forgetting the oldest
  std::uint64_t reused_ = 0;          // since the last take_counters
};

}  // namespace kforge::pipeline

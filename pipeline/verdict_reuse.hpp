#pragma once
// A GRPO group's repeated kernels are judged once (sandbox/repeat_verdicts.hpp): every member of
// a group is checked on the same input sets (sandbox_stage.hpp), so a repeat's compile,
// verification and timing would only measure the same code on the same inputs again; session 16's
// run spent 177 s of its 265 s loop in timed trials. The buffer drops such repeats anyway
// (buffer.dedup). The copy carries the repeat's own candidate; candidates of other groups are
// always judged on their own, fresh inputs.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "actors/stage_logic.hpp"
#include "sandbox/repeat_verdicts.hpp"

namespace kforge::pipeline {

class group_verdict_reuse final : public actors::sandbox_logic {
 public:
  /// Remembers the last `max_keys` (group, source) pairs: a group's members arrive within one
  /// generate call.
  explicit group_verdict_reuse(std::shared_ptr<actors::sandbox_logic> inner,
                               std::size_t max_keys = 4096);

  result<wire::VerdictT> evaluate(const wire::Candidate& c,
                                  const actors::envelope_info& info) override;
  /// The inner logic's counters, and reused_verdicts: verdicts copied since the last call.
  std::vector<std::pair<std::string, std::uint64_t>> take_counters() override;

 private:
  std::shared_ptr<actors::sandbox_logic> inner_;
  sandbox::repeat_verdicts repeats_;
};

}  // namespace kforge::pipeline

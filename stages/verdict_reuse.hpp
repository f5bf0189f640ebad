#pragma once
// Repeated kernels judged once (sandbox/repeat_verdicts.hpp), sandbox.reuse_verdicts:
//  - "group": a repeat within its GRPO group. Every member of a group is checked on the same
//    input sets (sandbox_stage.hpp), so judging it again would only measure the same code on the
//    same inputs; a 265 s run (2026-12-03) spent 177 s of its loop in timed trials.
//  - "task": also a kernel judged earlier in the run for the same prompt (another group, other
//    inputs). A small policy rewrites its kernels: in a default run (2026-12-03) about 575 of
//    the 1,240 candidates the sandbox really judged repeated a kernel judged before for their
//    prompt, and
//    with buffer.dedup = "run" the buffer drops them all; they count only in their group's
//    baseline. The price: such a kernel is judged on one group's inputs, not on each group's, so
//    a kernel that is right only by luck (a race, an uninitialised read) has one chance to be
//    caught instead of several; the other way round, a timeout or a slow timing that one
//    judgment met (the GPU busy) is copied to every later repeat too.
// The buffer drops such repeats anyway (buffer.dedup). A copy carries the repeat's own candidate.
// The caches are in memory: "once" is per process (its sandbox) and per leg of a resumed run.
// Both levels key a source by its 64-bit FNV-1a hash and length (the buffer's dedup trusts such
// a hash too), so that 16,384 remembered kernels cost kilobytes, not their sources. After a sandbox fault in a
// group, its other members are judged through the task key, and a copy among them counts as
// reused_earlier_verdicts.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "actors/logic_interfaces.hpp"
#include "config/options/sandbox_options.hpp"
#include "sandbox/repeat_verdicts.hpp"

namespace kforge::pipeline {

class verdict_reuse final : public actors::sandbox_logic {
 public:
  /// `scope` group or task (off: use the inner logic itself). Remembers the last `max_keys`
  /// (group, source) pairs, and with task the last `max_task_keys` (prompt, source) pairs.
  verdict_reuse(std::shared_ptr<actors::sandbox_logic> inner, verdict_reuse_scope scope,
                std::size_t max_keys = 4096, std::size_t max_task_keys = 16384);

  result<wire::VerdictT> evaluate(const wire::Candidate& c,
                                  const actors::envelope_info& info) override;
  /// The inner logic's counters, reused_verdicts (copied from a repeat in the same group) and,
  /// with task, reused_earlier_verdicts (from an earlier group of the same prompt), since the
  /// last call.
  std::vector<std::pair<std::string, std::uint64_t>> take_counters() override;

 private:
  std::shared_ptr<actors::sandbox_logic> inner_;
  sandbox::repeat_verdicts group_repeats_;
  std::optional<sandbox::repeat_verdicts> task_repeats_;
};

}  // namespace kforge::pipeline

#pragma once
// Judging a repeated kernel once. Where two candidates are the same source for the same task and
// are checked on the same input sets (the members of a GRPO group in a run; all of a task's
// samples in `kforge eval`, which seeds inputs per task), judging the second again only re-times
// the same code on the same inputs: seconds of GPU time, and timing runs one candidate at a time.
// (A run may also share a verdict across groups, on other inputs: stages/verdict_reuse.hpp.)
// A small policy repeats itself often: 151 of v12's 456 held-out samples repeat an earlier
// source of their task, and with them judged once its eval took 97 s instead of 181 s, every
// status the same (bench/RESULTS.md, kforge-tiny v12, 2026-12-03).
//
// The first candidate with a key is judged; one arriving while it is judged waits for that
// verdict; later ones get it at once. A copy is marked reused = true with zero compile, verify
// and time milliseconds (no time was spent on it), and carries no candidate: the caller sets the
// repeat's own. A sandbox fault (infra_error) or a failed judgment is not shared: the next
// candidate with the key is judged itself.
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <string>

#include "common/result.hpp"
#include "messages/rollout_generated.h"

namespace kforge::sandbox {

class repeat_verdicts {
 public:
  /// Remembers the last `max_keys` keys.
  explicit repeat_verdicts(std::size_t max_keys = 4096);

  /// The verdict for the candidate with `key` (the caller's: what makes two candidates the same
  /// and checked on the same inputs), from `judge` or copied. Thread-safe; `judge` runs without
  /// the lock. An exception from `judge` propagates (the key is forgotten).
  result<wire::VerdictT> verdict(const std::string& key,
                                 const std::function<result<wire::VerdictT>()>& judge);

  /// Copies handed out since the last call.
  std::uint64_t take_reused();

 private:
  using shared = std::shared_future<result<wire::VerdictT>>;
  void forget(const std::string& key);

  std::size_t max_keys_;
  std::mutex mu_;
  std::map<std::string, shared> seen_;
  std::deque<std::string> order_;  // keys by first sight, for forgetting the oldest
  std::uint64_t reused_ = 0;
};

/// A deep copy (the object API's tables are owned by unique_ptr).
wire::VerdictT copy_verdict(const wire::VerdictT& v);

}  // namespace kforge::sandbox

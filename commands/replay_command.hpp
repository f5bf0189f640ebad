#pragma once
// `kforge replay FILE --stage NAME`: feeds a stage the inputs it received in a recording and diffs
// what it produces against the outputs recorded in the same run. A deterministic stage must
// reproduce them exactly; a difference means the logic, its settings or its inputs changed.
//
// The stage is the real actor (actors/) with the real logic (stage_factory.hpp, from the run's
// manifest), driven on CAF's deterministic scheduler with a collector as its downstream.
//
// Files, when FILE is RUN_DIR/recordings/LINK@PROCESS.kfrec (an explicit option always wins):
//   manifest  --manifest, else RUN_DIR/manifest.toml, else the embedded default (with a note)
//   expected  --expect, else the one RUN_DIR/recordings/OUT@*.kfrec (OUT = scored for reward,
//             batches for buffer); none or several is an error asking for --expect
//   weights   buffer only: --weights, else RUN_DIR/recordings/weights@PROCESS.kfrec if it exists;
//             without one the buffer is replayed without weights (with a note). Weights and FILE
//             are merged by receive time, as the process's bus pump interleaved them.

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>

namespace kforge::pipeline {

struct replay_options {
  std::string file;                     ///< the stage's input recording (verdicts, scored)
  std::string stage;                    ///< "reward" or "buffer"
  std::optional<std::string> expect;    ///< recording of the outputs to compare with
  std::optional<std::string> weights;   ///< buffer only: recording of the weights it received
  std::optional<std::string> manifest;  ///< the run's manifest (stage settings)
  std::uint64_t show = 5;               ///< differences printed in full (all are counted)
};

/// Returns the process exit code: 0 when the outputs were reproduced exactly; 1 when they differ
/// (content, or outputs missing or extra) or an input is unreadable (truncated, foreign schema);
/// 2 for a usage error (a stage that cannot be replayed, a file of the wrong link, expected
/// outputs that cannot be found without --expect). The report goes to `out`, errors and notes to
/// `err`.
int replay(const replay_options& opt, std::ostream& out, std::ostream& err);

}  // namespace kforge::pipeline

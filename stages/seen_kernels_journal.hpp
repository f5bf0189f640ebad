#pragma once
// The buffer's memory of kernels already seen, across a resume (buffer.dedup = "run").
//
// With run-wide dedup a kernel is trained on once per prompt; the set of (prompt hash, code hash)
// pairs the buffer has seen is what says so. It is not in the trainer's checkpoint, so a resumed
// run used to start it empty and train again on kernels the run had trained on. The buffer stage
// appends every pair it sees for the first time to RUN_DIR/buffer/seen_kernels.txt (a line
// "PROMPT_HASH CODE_HASH", 16 hex digits each, each line written whole as it comes). A run resumed at step N first
// moves that file to seen_kernels-before-step-N.txt, as the head keeps an earlier leg's recordings
// in recordings-before-step-N/, and starts from every before-step file up to N. A replay of a
// leg's buffer reads the same files, so it starts where the leg's buffer started. The pairs are
// all the earlier legs saw, those after the checkpoint a leg resumed from included (the buffer
// does not know when the trainer checkpoints).

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/file_writer.hpp"
#include "common/result.hpp"

namespace kforge::pipeline {

class seen_kernels_journal {
 public:
  using pair = std::pair<std::uint64_t, std::uint64_t>;  ///< (prompt hash, code hash)

  /// RUN_DIR/buffer/seen_kernels.txt, the current leg's.
  static std::string path_in(const std::string& run_dir);

  /// The pairs the legs before a leg resumed at `step` saw: every seen_kernels-before-step-M.txt
  /// with M <= step, in order. A malformed line is an error naming the file and line.
  static result<std::vector<pair>> read_before(const std::string& run_dir, std::uint64_t step);

  /// Starts the journal of this leg. `resumed_at`: the last leg's file becomes its before-step
  /// file (appended to one already there, from a leg that resumed at the same step); else a new
  /// run: the earlier run's files in this directory are removed.
  static result<seen_kernels_journal> open(const std::string& run_dir,
                                           std::optional<std::uint64_t> resumed_at);

  /// Appends one pair's line, whole or not at all; an error names the file and the reason.
  status append(pair p);
  const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
  std::optional<file_writer> out_;
};

}  // namespace kforge::pipeline

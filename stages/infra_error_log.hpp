#pragma once
// Why verdicts were infra_error, kept where a person can read it: RUN_DIR/infra_errors.jsonl, one
// JSON line per such verdict ({"task", "reason", "worker", "group_id", "policy_version"}),
// each appended whole as it comes (common/file_writer.hpp: a refused line leaves none of it). Each leg's own, as summary.json: the head removes an earlier
// run's file at a new run's start, and a resumed leg's start moves the last leg's to
// infra_errors-before-step-N.jsonl.
//
// An infra_error is the sandbox's fault, not the policy's, so the reward leaves the sample unscored
// and the run summary only counts it (status_infra_error). Without the reasons a run that had some
// cannot say why unless its verdict recording is at hand: two runs on the GPU (2026-12-03) had 13
// and 6, and their reasons went with the device machine. So the first one is also said at once, as
// is the first line that could not be written (that loses no sample: the reward scores alike).

#include <cstdint>
#include <iostream>
#include <optional>
#include <string>

#include "common/file_writer.hpp"
#include "common/result.hpp"
#include "messages/envelope.hpp"

namespace kforge::pipeline {

class infra_error_log {
 public:
  /// Appends to path_in(run_dir); an empty `run_dir` writes nothing (replay, tests). The first
  /// line written, and the first that could not be, are said on `say`.
  explicit infra_error_log(std::string run_dir, std::ostream& say = std::cerr);

  /// RUN_DIR/infra_errors.jsonl.
  static std::string path_in(const std::string& run_dir);

  /// Writes `v`'s line when it is an infra_error verdict of policy version `version`: true when a
  /// line was written, false for any other verdict (or no run directory), an error naming the file
  /// when it cannot be written.
  result<bool> offer(const wire::Verdict& v, std::uint64_t version);

 private:
  result<bool> write(const wire::Verdict& v, std::uint64_t version);

  std::string path_;  ///< empty: disabled
  std::ostream& say_;
  std::optional<file_writer> out_;  ///< opened at the first line
  bool told_ = false;
  bool write_told_ = false;
};

}  // namespace kforge::pipeline

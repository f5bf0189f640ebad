#pragma once
// The fastest correct kernel found for each task, kept where a person can take it: RUN_DIR/best/
// STEM.cu (the candidate's source) and STEM.json (task id, speedup, times, policy version, verdict
// summary), STEM being the task id made a file name (file_stem). Ranked by the speedup over the
// reference measured in the kernel's own verdict (reference_speedup in reward.hpp).
//
// Files already there count: a run into a directory that holds a better kernel from an earlier run
// keeps it, so nothing found is ever overwritten by something slower. Both files are written to a
// temporary name and renamed, so a reader never sees half a file.

#include <cstdint>
#include <map>
#include <string>

#include "common/result.hpp"
#include "messages/envelope.hpp"

namespace kforge::pipeline {

class best_kernels {
 public:
  /// Keeps the best kernels under `run_dir`/best; an empty `run_dir` keeps nothing and writes
  /// nothing (replay, tests).
  explicit best_kernels(std::string run_dir);

  /// Offers verdict `v` of a candidate of policy version `version`. True when it is an ok verdict
  /// with timings, faster than the task's best so far, and its files were written; an error (the
  /// path and why) when they could not be, in which case the task's best stays as it was.
  result<bool> offer(const wire::Verdict& v, std::uint64_t version);

  /// The task id as a file name: '/' becomes "__", any character outside [A-Za-z0-9._-] '_', and a
  /// leading '.' '_' ("l1/softmax_rows" -> "l1__softmax_rows").
  static std::string file_stem(const std::string& task_id);

 private:
  /// The best speedup known for `task`: seen in this run, else read from its .json, else 0.
  double best_for(const std::string& task);

  std::string dir_;  ///< RUN_DIR/best, or empty: disabled
  std::map<std::string, double> best_;
};

}  // namespace kforge::pipeline

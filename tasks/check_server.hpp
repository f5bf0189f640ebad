#pragma once
// `kforge tasks validate` runs each task's checks (tasks/task_check.hpp) in a child process, so a
// reference that never returns is stopped at the time limit instead of hanging the command: a
// TorchScript call cannot be interrupted inside the process that made it. One child serves every
// check, one request line each on its control channel (common/child_process.hpp); a stopped or
// crashed child is replaced at the next check.

#include <chrono>
#include <string>
#include <vector>

#include "common/child_process.hpp"
#include "tasks/task_check.hpp"

namespace kforge::tasks {

/// The child's side: answers check requests on fd 3 until the parent goes away; the exit code.
int serve_task_checks();

/// The parent's side.
class check_client {
 public:
  /// `argv` starts a program that calls serve_task_checks (`kforge tasks check-server`).
  explicit check_client(std::vector<std::string> argv) : argv_(std::move(argv)) {}

  /// check_task_runs(t, opt) in the child. Past `limit` (compile and runs together) the child is
  /// killed and the report's one problem says the reference ran past the limit.
  check_report check(const task& t, const check_options& opt, std::chrono::milliseconds limit);

 private:
  std::vector<std::string> argv_;
  child_process child_;
};

}  // namespace kforge::tasks

#pragma once
// One candidate from source to verdict: static checks, compile (with its library check and
// cache), then, where a GPU runner is given, verification and timing (runner.hpp). Without a
// runner the verdict of a candidate that compiled is `compiled` (compile-only mode). Thread-safe:
// one evaluator serves many worker threads; each thread brings its own runner.
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "common/result.hpp"
#include "messages/rollout_generated.h"
#include "sandbox/compiler.hpp"
#include "sandbox/runner.hpp"
#include "sandbox/toolchain.hpp"
#include "tasks/task.hpp"

namespace kforge::sandbox {

struct evaluator_options {
  compile_options compile;
  /// Also check nvcc's preprocessed output (static_check.hpp step 2), within this time.
  bool preprocess_check = true;
  std::chrono::milliseconds preprocess_time_limit{30'000};
  /// The source and library checks. Off only in the test that shows what the run stage's OS
  /// confinement stops on its own (tests/sandbox/confinement_gpu_test.cpp): never in a run.
  bool static_checks = true;
};

class evaluator {
 public:
  /// Finds the toolchain. Fails when nvcc cannot be found.
  static result<evaluator> create(evaluator_options options);
  const toolchain& tools() const noexcept { return tools_; }
  const evaluator_options& options() const noexcept { return options_; }
  /// Builds the known-good probe library (for run_options::probe_library) in the compile cache,
  /// or in `dir` when there is no cache.
  result<std::string> probe_library(const std::string& dir) const;
  /// Runs a compiled library of a candidate (verification and timing), e.g. on a runner borrowed
  /// for the call.
  using run_stage = std::function<run_outcome(const tasks::task&, const std::string& library)>;
  /// The verdict for `source` as a candidate for `t`. `run` may be empty (compile-only: the
  /// verdict of a candidate that compiles is `compiled`). Never throws.
  wire::VerdictT evaluate(const tasks::task& t, std::string_view source,
                          const run_stage& run) const;

 private:
  evaluator(toolchain tc, evaluator_options o) : tools_(std::move(tc)), options_(std::move(o)) {}
  toolchain tools_;
  evaluator_options options_;
};

}  // namespace kforge::sandbox

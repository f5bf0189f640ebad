#pragma once
// Executing a task to see that it is honest: it compiles, runs, matches its declared outputs, and
// is not degenerate. A degenerate task teaches the policy to cheat: if an output is constant, zero
// within tolerance or independent of an input, a kernel that ignores the input passes.
// `kforge tasks validate`, the CI test of the built-in library and (later) synthesis use it.

#include <cstdint>
#include <string>
#include <vector>

#include "tasks/task.hpp"
#include "tasks/tensor_list.hpp"

namespace kforge::tasks {

struct check_options {
  device dev = device::cpu();
  /// The shapes to run at; see smallest_shapes() for what CI uses.
  shape_choice shapes;
  std::uint64_t seed = 1;
};

struct check_report {
  std::string task_id;
  /// Empty when the task passed; otherwise one line per problem found.
  std::vector<std::string> problems;
  /// The outputs of the first run (empty when it did not run).
  std::vector<tensor_summary> outputs;
  double elapsed_ms = 0.0;  ///< the whole check, compile included

  bool ok() const { return problems.empty(); }
};

/// Compiles and runs `t` at the chosen shapes, then checks:
///  - the outputs have the declared count and dtypes (and shapes at the primary shapes);
///  - every float output is finite, not within atol of zero everywhere, and at most 10% of its
///    nonzero elements are below atol (else atol is loose for the output's scale);
///  - every output with more than one element is not constant;
///  - the reference does not modify its inputs, and two runs on the same inputs agree within 1%
///    of the tolerance (exactly, on the CPU);
///  - each randomly drawn input changes some output beyond the tolerance when it alone is redrawn
///    with another seed, and each output changes under some such redraw.
/// Constant inputs are exempt from the dependence check (redrawing them gives the same values).
check_report check_task_runs(const task& t, const check_options& opt = {});

}  // namespace kforge::tasks

#pragma once
// `kforge tasks baseline --against compile`: every task's reference timed eagerly and under
// torch.compile by tasks/baselines/measure_baselines.py under the machine's Python torch (the GPU
// host's torch 2.x; found as the KernelBench importer finds it, python_with_torch), written as
// JSON Lines that `kforge eval --baselines` and `[reward] baselines` read
// (tasks/measured_baselines.hpp). No LibTorch here: Python does the work, so this builds and
// refuses clearly everywhere. Where torch has no torch.compile (torch < 2.0) it refuses: no eager
// numbers stand in for compile ones.

#include <iosfwd>
#include <string>
#include <vector>

namespace kforge::tasks {

struct compile_baseline_options {
  std::vector<std::string> files;  ///< task files; empty: the built-in library
  std::string out;                 ///< JSON Lines to write (required)
  std::string device = "cuda";     ///< cuda, cuda:N or cpu
  std::string mode = "default";    ///< torch.compile mode (measure_baselines.py's --mode)
  std::string shapes = "primary";  ///< primary or smallest (a quick check; eval and reward skip those)
  int trials = 30;                 ///< timed trials of eager and of compiled, each
  bool eager_only = false;         ///< eager alone (any torch): for checks where torch.compile is missing
};

/// The torch.compile modes the script accepts.
const std::vector<std::string>& compile_modes();

/// Runs the script. 0 every task measured; 1 some task not measured (its line says why) or the
/// script failed; 2 bad input (a bad task file, no such device, a bad option); 3 the Python torch
/// has no torch.compile.
int measure_compile_baselines(const compile_baseline_options& o, std::ostream& out, std::ostream& err);

}  // namespace kforge::tasks

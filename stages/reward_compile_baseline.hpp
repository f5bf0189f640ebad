#pragma once
// `[reward] baseline = "compile"`: a task's first baseline is torch.compile's time rather than
// eager's. The sandbox times only eager (in LibTorch); the baselines file
// (tasks/measured_baselines.hpp) holds eager and compile times from the GPU host's Python torch.
// The two harnesses' absolute clocks need not agree, so only the file's ratio is used:
//
//   t_base = eager_ms measured by the sandbox * compile_ms / eager_ms of the file's line
//   speedup_vs_compile = t_base / t_gen
//
// A task the file has no compile time for gets the speed term of a verdict without timing
// (neutral), is counted (compile_baseline_missing) and named once: it is never scored against
// eager in compile's place.

#include <map>
#include <string>

#include "common/result.hpp"
#include "config/options/reward_options.hpp"

namespace kforge::pipeline {

/// Per task, compile_ms / eager_ms of one device's lines of the baselines file.
struct compile_scale {
  std::string file, device, mode, torch;
  std::map<std::string, double> ratio;
  /// One line for people: "12 task(s) against torch.compile (mode default, torch 2.11) on NVIDIA H100 ...".
  std::string describe() const;
};

/// Empty for baseline = "eager"; for "compile", o.baselines read: it must hold compile times of
/// exactly one device (the sandbox's GPU model; the run does not check which, kforge eval does).
/// An error names the file and what is wrong.
result<compile_scale> load_compile_scale(const reward_options& o);

}  // namespace kforge::pipeline

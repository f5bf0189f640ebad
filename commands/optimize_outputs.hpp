#pragma once
// What `kforge optimize` writes (commands/optimize_command.hpp lists the files): every turn's
// kernel and verdict, transcripts, the best kernel, the reports, and the verdict lines that
// `kforge compare` reads.
#include <cstddef>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/episode.hpp"
#include "common/result.hpp"
#include "tasks/task.hpp"

namespace kforge::pipeline {

/// One episode with what the files and the reports need of it.
struct episode_run {
  const tasks::task* task = nullptr;
  std::size_t index = 0;                ///< the episode's number among its task's
  agent::episode ep;
  std::string transcript;
  std::vector<nlohmann::json> verdicts;  ///< one per turn
  std::vector<std::string> sources;      ///< one per turn
};

/// What the reports say of the run.
struct optimize_run_facts {
  std::string model;
  int turns = 0;
  bool on_gpu = false;  ///< false: compile-only, no kernel can be correct
  /// Task id -> compile_ms / eager_ms on the sandbox's GPU (measured_baselines::compile_ratios),
  /// from `baselines`; empty file name: no speedups against torch.compile are given.
  std::string baselines;
  std::map<std::string, double> compile_ratios;
};

/// Writes `runs` (the episodes of one or more tasks, in task order) under `dir`: with one task the
/// task's files are in `dir` itself, with several in dir/<task id>/, and then dir/report.md sums
/// up over tasks. dir/verdicts.jsonl holds every turn's verdict with its task, episode and turn.
/// Prints where the best kernels are to `out`.
status write_optimize_outputs(const std::string& dir, const std::vector<episode_run>& runs, bool several_tasks,
                              const optimize_run_facts& facts, std::ostream& out);

}  // namespace kforge::pipeline

#pragma once
// `kforge eval --baselines FILE`: speedups against torch.compile beside those against eager.
//
// The sandbox times each kernel against the reference's eager time, in its own harness. FILE
// (tasks/measured_baselines.hpp) holds eager and torch.compile times of the same references from
// the GPU host's Python torch. The two harnesses' absolute clocks need not agree, so only FILE's
// ratio is used: speedup_vs_compile = speedup_vs_eager * compile_ms / eager_ms of FILE's line for
// the task, on the device of the sandbox's GPU (its name as CUDA gives it). Tasks without such a
// line are counted and named, never scored against eager in compile's place.

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tasks/measured_baselines.hpp"

namespace kforge::sandbox {

/// Adds "speedup_vs_compile" to an ok verdict line with a "speedup" whose task is in `ratios`
/// (measured_baselines::compile_ratios of the sandbox's device).
void add_speedup_vs_compile(nlohmann::json& verdict, const std::map<std::string, double>& ratios);

/// The summary's "vs_compile" block: the file, the device its times came from, mode and torch
/// version; how many of the verdicts' tasks have a compile time on `device` and which lack one;
/// and summarize_verdicts (eval_command.hpp) over the tasks that have one, against eager
/// ("vs_eager") and against compile ("vs_compile"), so both columns count the same tasks.
/// `device` empty: the sandbox ran no GPU, so there is nothing to compare.
nlohmann::json against_compile(const std::vector<nlohmann::json>& verdicts,
                               const tasks::measured_baselines& baselines, const std::string& device);

/// Human-readable form of against_compile's block.
std::string format_against_compile(const nlohmann::json& block);

}  // namespace kforge::sandbox

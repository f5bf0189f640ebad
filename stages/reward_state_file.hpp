#pragma once
// The reward's per-task state across a resume: each task's reference time, best kernel time,
// speedups seen and whether its baseline has switched to the best kernel (reward.hpp). It is not
// in the trainer's checkpoint, so a resumed run used to start every task's baseline again from the
// eager time, and a task past baseline_switch_speedup was suddenly rewarded against eager again.
//
// The reward stage writes its state to RUN_DIR/reward/state.json (atomically) whenever the policy
// version of the samples it scores moves on, and when it stops. A run resumed at step N first
// moves that file to state-before-step-N.json, as the head keeps an earlier leg's recordings in
// recordings-before-step-N/, and starts from it; a replay of that leg's reward reads the same
// file, so it starts where the leg's reward started. Like the buffer's seen kernels
// (seen_kernels_journal.hpp) the state is the last leg's at its stop, samples after the checkpoint
// a leg resumed from included.

#include <cstdint>
#include <optional>
#include <string>

#include "common/result.hpp"

namespace kforge::pipeline::reward_state_file {

/// RUN_DIR/reward/state.json, the current leg's.
std::string path_in(const std::string& run_dir);
/// RUN_DIR/reward/state-before-step-N.json: where a leg resumed at `step` started from.
std::string before_path(const std::string& run_dir, std::uint64_t step);

/// Prepares this leg's file. `resumed_at`: the last leg's state.json becomes its before-step file
/// (replacing one of a leg that resumed at the same step: the newer state is what this leg goes
/// on from); else a new run: the earlier run's files in RUN_DIR/reward are removed. An error
/// names the file.
status begin_leg(const std::string& run_dir, std::optional<std::uint64_t> resumed_at);

/// The state a leg resumed at `step` started from, or nothing when there is none (the run was
/// made before the reward kept its state, or stopped before its reward scored anything). A file
/// that cannot be read is an error naming it.
result<std::optional<std::string>> read_before(const std::string& run_dir, std::uint64_t step);

}  // namespace kforge::pipeline::reward_state_file

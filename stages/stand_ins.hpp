#pragma once
// Stand-ins for the stages' real logic: task library, policy model, sandbox and GRPO trainer.
// They let the whole topology run —
// processes, actors, bus, broker, recordings, metrics — on synthetic data, and they say so: every
// candidate, verdict and weights message they make is labelled "stand-in". They are deterministic
// (same seed and inputs, same outputs), so replay can check them too. Never a source of learning.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "actors/logic_interfaces.hpp"

namespace kforge::pipeline {

/// The label every stand-in output carries, so no one mistakes it for a real result.
inline constexpr const char* stand_in_label = "stand-in";

struct stand_in_options {
  std::uint64_t seed = 0;
  std::uint32_t group_size = 8;
  std::uint32_t requests_per_step = 8;  ///< GRPO groups per step (= buffer.groups_per_batch)
  std::chrono::milliseconds sandbox_delay{0};
  std::uint32_t repeat_every = 0;  ///< every this-many-th group is one kernel repeated (0: none)
  int max_turns = 1;               ///< [agent] max_turns: > 1, candidates are turns of episodes
};

/// Synthetic tasks (a few element-wise shapes), `requests_per_step` requests per step.
std::shared_ptr<actors::task_source> make_stand_in_tasks(const stand_in_options& o);
/// Synthetic candidates: the known-good ABI kernel with a per-sample variation, unique code per
/// candidate, except in every `repeat_every`-th group, whose candidates are all the same (a
/// collapsed policy, for the buffer's dedup). set_weights accepts any version. With max_turns > 1
/// the candidates are first turns of episodes, and each observation gets a next turn whose kernel
/// differs from the last (no tokens: the stand-in has no model).
std::shared_ptr<actors::sampler_logic> make_stand_in_sampler(const stand_in_options& o);
/// Synthetic verdicts drawn from the candidate's code hash: most ok with a timing, some
/// compile_error, wrong_answer or runtime_error. Compiles and runs nothing.
std::shared_ptr<actors::sandbox_logic> make_stand_in_sandbox(const stand_in_options& o);
/// Publishes version + 1 for each batch, with a checksum of the batch's rewards; trains nothing.
std::shared_ptr<actors::trainer_logic> make_stand_in_trainer(const stand_in_options& o);

}  // namespace kforge::pipeline

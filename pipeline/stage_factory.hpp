#pragma once
// Which logic each stage runs, made from the manifest. Today reward and buffer are real; the task
// library, policy model, sandbox and trainer are stand-ins until their issues land (stand_ins.hpp).
// `kforge run`, `kforge worker` and `kforge replay` all build stages here, so they agree.

#include <memory>
#include <string>

#include "actors/stage_logic.hpp"
#include "pipeline/manifest.hpp"

namespace kforge::pipeline {

std::shared_ptr<actors::task_source> make_task_source(const manifest& m);
std::shared_ptr<actors::sampler_logic> make_sampler_logic(const manifest& m);
/// The stand-in or, with sandbox.backend = "nvcc", the process's shared real sandbox (an error when
/// it cannot start: no nvcc, a GPU of the group that does not work).
result<std::shared_ptr<actors::sandbox_logic>> make_sandbox_logic(const manifest& m);
std::shared_ptr<actors::reward_logic> make_reward_logic(const manifest& m);
std::shared_ptr<actors::buffer_logic> make_buffer_logic(const manifest& m);
std::shared_ptr<actors::trainer_logic> make_trainer_logic(const manifest& m);

/// What the stage of kind `k` runs today, in a few words; "stand-in" when it is not the real thing.
std::string logic_description(actor_kind k, const manifest* m = nullptr);
/// Whether kind `k` runs a stand-in rather than its real logic.
bool is_stand_in(actor_kind k, const manifest* m = nullptr) noexcept;

}  // namespace kforge::pipeline

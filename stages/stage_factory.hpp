#pragma once
// Which logic each stage runs, made from the manifest: the real component where the manifest asks
// for it, else a stand-in that says so (stand_ins.hpp; e.g. tasks.source = "stand-in").
// `kforge run`, `kforge worker` and `kforge replay` all build stages here, so they agree.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/logic_interfaces.hpp"
#include "config/manifest.hpp"
#include "stages/seen_kernels_journal.hpp"

namespace kforge::pipeline {

/// The real task generator over the built-in library and tasks.files (tasks.source = "builtin"),
/// over tasks.files alone ("files"), or the stand-in ("stand-in"). An error, never a fallback, when a file or the template is bad.
/// With a `run_dir`, the real generator writes its curriculum's state to
/// curriculum_state_file(run_dir) at every step, and `resuming` it goes on from that state (its
/// per-task results and generator), so a resumed run does not see every task as new again.
result<std::shared_ptr<actors::task_source>> make_task_source(const manifest& m,
                                                             const std::string& run_dir = {},
                                                             bool resuming = false);
/// RUN_DIR/curriculum.json.
std::string curriculum_state_file(const std::string& run_dir);
/// The engine sampler (stages/engine_sampler.hpp) when sampler.backend = "engine" and
/// sampler.model names a checkpoint; the stand-in while sampler.model is empty. An error when the
/// model cannot be loaded, when this build has no LibTorch model, or for the openai backend (not
/// built yet). `process`: the hosting process (its sampler's rank when weights go by NCCL).
result<std::shared_ptr<actors::sampler_logic>> make_sampler_logic(const manifest& m, const std::string& process);
/// The stand-in or, with sandbox.backend = "nvcc", the process's shared real sandbox (an error when
/// it cannot start: no nvcc, a GPU of the group that does not work).
result<std::shared_ptr<actors::sandbox_logic>> make_sandbox_logic(const manifest& m);
/// The reward formula with its counters; a correct kernel faster than any before for its task is
/// kept under `run_dir`/best (best_kernels.hpp). An empty `run_dir` writes nothing (replay).
std::shared_ptr<actors::reward_logic> make_reward_logic(const manifest& m,
                                                        const std::string& run_dir);
/// A run's reward: best kernels and its state under `run_dir` (reward_state_file.hpp); a run
/// resumed at step N goes on from the state the last leg left, so a task whose baseline switched
/// to its best kernel stays switched. A state that cannot be read is an error naming the file.
result<std::shared_ptr<actors::reward_logic>> make_run_reward_logic(
    const manifest& m, const std::string& run_dir, std::optional<std::uint64_t> resumed_at);
/// The reward of a replay: nothing written; `state`, if given, is where the leg's reward started.
result<std::shared_ptr<actors::reward_logic>> make_replay_reward_logic(
    const manifest& m, const std::optional<std::string>& state);
/// The sample buffer, starting with the kernels in `seen` counted as seen before (dedup = "run";
/// a replay of a resumed leg) and writing the ones it sees first to `journal`, if given.
std::shared_ptr<actors::buffer_logic> make_buffer_logic(
    const manifest& m, const std::vector<seen_kernels_journal::pair>& seen = {},
    std::optional<seen_kernels_journal> journal = std::nullopt);
/// A run's buffer: with buffer.dedup = "run", its journal under `run_dir`
/// (seen_kernels_journal.hpp), and a run resumed at step N starts from what the earlier legs saw,
/// so it does not train again on a kernel the run trained on before.
result<std::shared_ptr<actors::buffer_logic>> make_run_buffer_logic(
    const manifest& m, const std::string& run_dir, std::optional<std::uint64_t> resumed_at);
/// The stand-in while the sampler is (sampler.model empty); else GRPO on the policy model
/// (policy_trainer_stage.hpp), writing weights, checkpoints and train.jsonl under `run_dir`.
/// `resume_from` non-empty: the trainer continues from that checkpoint directory (an error for the
/// stand-in, which has no state to continue).
result<std::shared_ptr<actors::trainer_logic>> make_trainer_logic(
    const manifest& m, const std::string& run_dir, const std::string& resume_from = {});

/// What the stage of kind `k` runs today, in a few words; "stand-in" when it is not the real thing.
std::string logic_description(actor_kind k, const manifest* m = nullptr);

/// "" or a warning for the banner: inference servers started by `command` on `server_gpus` share a
/// GPU with the sandbox's `sandbox_gpus` and are not kforge serve. kforge serve takes the
/// host-wide GPU lock around its generation as the engine does (common/gpu_use_lock.hpp), so a
/// timed trial runs alone; vLLM or SGLang do not, and their generation stretches the sandbox's
/// timed trials (the sampler unlocked on the sandbox's GPU, 2026-12-02: 22 % of verdicts falsely
/// hack_suspected).
std::string unlocked_server_warning(const std::string& command, const std::vector<int>& server_gpus,
                                    const std::vector<int>& sandbox_gpus);
/// Whether kind `k` runs a stand-in rather than its real logic.
bool is_stand_in(actor_kind k, const manifest* m = nullptr) noexcept;

}  // namespace kforge::pipeline

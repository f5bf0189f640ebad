#include "stages/stage_factory.hpp"

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <stdexcept>

#if defined(KFORGE_MODEL_WITH_TORCH)
#include "stages/engine_sampler.hpp"
#include "stages/openai_sampler.hpp"
#include "stages/policy_trainer_stage.hpp"
#endif
#include "common/text_file.hpp"
#include "stages/reward_state_file.hpp"
#include "stages/sandbox_stage.hpp"
#include "stages/buffer_stage.hpp"
#include "stages/reward_stage.hpp"
#include "stages/stand_ins.hpp"
#include "stages/task_generator.hpp"

namespace kforge::pipeline {

namespace {

// The openai backend's servers, for the run's banner.
std::string server_list(const sampler_options& s) {
  std::string out = s.server_url;
  for (const auto& u : s.server_urls) out += (out.empty() ? "" : ", ") + u;
  return out;
}

std::string openai_servers(const manifest& m) {
  std::string d = "real: openai backend, inference servers ";
  const std::string urls = server_list(m.sampler);
  if (m.sampler.server.command.empty()) return d + "at " + urls;
  d += "started by the run (" + m.sampler.server.command + ")";
  if (!urls.empty()) d += " and at " + urls;
  const auto servers = stage_gpus(m, actor_kind::sampler);
  const auto sandbox = stage_gpus(m, actor_kind::sandbox_worker);
  if (!servers || !sandbox || m.sandbox.backend != sandbox_backend::nvcc) return d;
  return d + unlocked_server_warning(m.sampler.server.command, *servers, *sandbox);
}

stand_in_options stand_ins(const manifest& m) {
  stand_in_options o;
  o.seed = static_cast<std::uint64_t>(m.run.seed);
  o.group_size = static_cast<std::uint32_t>(m.sampler.group_size);
  o.requests_per_step = static_cast<std::uint32_t>(m.buffer.groups_per_batch);
  o.sandbox_delay = std::chrono::milliseconds(m.sandbox.stand_in_ms);
  o.repeat_every = static_cast<std::uint32_t>(m.sampler.stand_in_repeat_every);
  o.max_turns = m.agent.max_turns;
  return o;
}

}  // namespace

result<std::shared_ptr<actors::task_source>> make_task_source(const manifest& m,
                                                             const std::string& run_dir,
                                                             bool resuming) {
  if (m.tasks.source == task_source_kind::stand_in) return make_stand_in_tasks(stand_ins(m));
  const auto state = run_dir.empty() ? std::string() : curriculum_state_file(run_dir);
  auto g = make_task_generator(m, state);
  if (!g) return g.err();
  if (resuming) {
    std::error_code ec;
    if (!std::filesystem::exists(state, ec)) {
      std::cout << "task generator: no curriculum state at " << state
                << " (a run from before it was kept): every task starts unseen\n";
    } else {
      auto text = read_text_file(state);
      if (!text) return error{"task generator: " + text.message()};
      std::vector<std::string> dropped;
      if (auto s = (*g)->restore(*text, &dropped); !s)
        return error{state + ": " + s.message()};  // the message starts "task generator: "
      std::cout << "task generator: the curriculum goes on from " << state << "\n";
      if (!dropped.empty())
        std::cout << "task generator: " << dropped.size() << " task(s) of the saved curriculum "
                  << "are not in the pool (they came over the bus), first '" << dropped.front()
                  << "': left out\n";
    }
  }
  return std::shared_ptr<actors::task_source>(std::move(g).value());
}
std::string curriculum_state_file(const std::string& run_dir) {
  return (std::filesystem::path(run_dir) / "curriculum.json").string();
}
result<std::shared_ptr<actors::sampler_logic>> make_sampler_logic(const manifest& m, const std::string& process) {
  if (m.sampler.model.empty()) return make_stand_in_sampler(stand_ins(m));
#if defined(KFORGE_MODEL_WITH_TORCH)
  if (m.sampler.backend == sampler_backend::openai) return make_openai_sampler(openai_sampler_options_from(m));
  auto o = engine_sampler_options_from(m, process);
  if (!o) return o.err();
  return make_engine_sampler(*o);
#else
  (void)process;
  return error{"sampler.model = \"" + m.sampler.model +
               "\": this kforge was built without the LibTorch model (KFORGE_WITH_TORCH=OFF or "
               "KFORGE_SKIP_MODEL=ON), so the engine sampler is not available"};
#endif
}
result<std::shared_ptr<actors::sandbox_logic>> make_sandbox_logic(const manifest& m) {
  if (m.sandbox.backend == sandbox_backend::nvcc) return shared_nvcc_sandbox(m);
  return make_stand_in_sandbox(stand_ins(m));
}
std::shared_ptr<actors::reward_logic> make_reward_logic(const manifest& m,
                                                        const std::string& run_dir) {
  // Callers that can report an error check the file first (make_run_reward_logic).
  auto compile = load_compile_scale(m.reward);
  if (!compile) throw std::runtime_error(compile.message());
  return std::make_shared<reward_stage>(m.reward, run_dir, std::string(), agent::rules_of(m.agent),
                                        std::move(compile).value());
}
result<std::shared_ptr<actors::reward_logic>> make_run_reward_logic(
    const manifest& m, const std::string& run_dir, std::optional<std::uint64_t> resumed_at) {
  auto compile = load_compile_scale(m.reward);
  if (!compile) return compile.err();
  if (m.reward.baseline == reward_baseline::compile) std::cout << "reward: " << compile->describe() << "\n";
  if (run_dir.empty()) return make_reward_logic(m, run_dir);
  // A resumed leg's begin_leg moves the last leg's state to its before-step file first.
  if (auto s = reward_state_file::begin_leg(run_dir, resumed_at); !s) return s.err();
  auto stage = std::make_shared<reward_stage>(m.reward, run_dir, reward_state_file::path_in(run_dir),
                                              agent::rules_of(m.agent), std::move(compile).value());
  if (resumed_at) {
    auto state = reward_state_file::read_before(run_dir, *resumed_at);
    if (!state) return state.err();
    const auto file = reward_state_file::before_path(run_dir, *resumed_at);
    if (!*state) {
      std::cout << "reward: no saved state before step " << *resumed_at
                << " (a run from before it was kept, or a leg that scored nothing or could not "
                   "save it): every task's baseline starts from eager\n";
    } else {
      if (auto s = stage->restore(**state); !s)
        return error{file + ": " + s.message() + " (remove the file to start every task's baseline anew)"};
      std::cout << "reward: goes on from " << file << " (" << stage->model().switched_tasks()
                << " task(s) against their best kernel)\n";
    }
  }
  return std::shared_ptr<actors::reward_logic>(std::move(stage));
}
result<std::shared_ptr<actors::reward_logic>> make_replay_reward_logic(
    const manifest& m, const std::optional<std::string>& state) {
  // No run directory: a replay re-scores, it writes neither best kernels nor state.
  auto compile = load_compile_scale(m.reward);
  if (!compile) return compile.err();
  auto stage = std::make_shared<reward_stage>(m.reward, std::string(), std::string(), agent::rules_of(m.agent),
                                              std::move(compile).value());
  if (state)
    if (auto s = stage->restore(*state); !s) return s.err();
  return std::shared_ptr<actors::reward_logic>(std::move(stage));
}
std::shared_ptr<actors::buffer_logic> make_buffer_logic(
    const manifest& m, const std::vector<seen_kernels_journal::pair>& seen,
    std::optional<seen_kernels_journal> journal) {
  auto o = m.buffer;
  o.serve_single_with_draws = m.trainer.baseline == group_baseline::draws;
  auto stage = std::make_shared<buffer_stage>(o, std::move(journal));
  for (const auto& [prompt, code] : seen) stage->buffer().remember(prompt, code);
  return stage;
}
result<std::shared_ptr<actors::buffer_logic>> make_run_buffer_logic(
    const manifest& m, const std::string& run_dir, std::optional<std::uint64_t> resumed_at) {
  if (m.buffer.dedup != dedup_scope::run) return make_buffer_logic(m);
  // A resumed leg's open moves the last leg's file to its before-step file first.
  auto j = seen_kernels_journal::open(run_dir, resumed_at);
  if (!j) return j.err();
  std::vector<seen_kernels_journal::pair> before;
  if (resumed_at) {
    auto b = seen_kernels_journal::read_before(run_dir, *resumed_at);
    if (!b) return b.err();
    before = std::move(*b);
    std::cout << "buffer: " << before.size() << " kernel(s) the run saw before step "
              << *resumed_at << " count as seen (dedup = \"run\")\n";
  }
  return make_buffer_logic(m, before, std::move(*j));
}
result<std::shared_ptr<actors::trainer_logic>> make_trainer_logic(const manifest& m,
                                                                  const std::string& run_dir,
                                                                  const std::string& resume_from) {
  // The trainer trains what the sampler samples: with the stand-in sampler there are no tokens to
  // train on, so the trainer is the stand-in too.
  if (m.sampler.model.empty()) {
    if (!resume_from.empty())
      return error{"trainer: cannot resume from " + resume_from +
                   ": the stand-in trainer keeps no state (sampler.model is empty)"};
    return make_stand_in_trainer(stand_ins(m));
  }
#if defined(KFORGE_MODEL_WITH_TORCH)
  auto o = policy_trainer_stage_options_from(m, run_dir);
  if (!o) return o.err();
  o->resume_from = resume_from;
  return make_policy_trainer_stage(*o);
#else
  return error{"sampler.model = \"" + m.sampler.model +
               "\": this kforge was built without the LibTorch model, so the GRPO trainer is not "
               "available"};
#endif
}

bool is_stand_in(actor_kind k, const manifest* m) noexcept {
  switch (k) {
    case actor_kind::sandbox_worker:
      return !m || m->sandbox.backend == sandbox_backend::stand_in;
    case actor_kind::task_generator:
      return m && m->tasks.source == task_source_kind::stand_in;
    case actor_kind::sampler:
    case actor_kind::trainer:
      return !m || m->sampler.model.empty();
    case actor_kind::reward:
    case actor_kind::buffer:
    case actor_kind::sandbox_pool:
      return false;
    default:
      return true;
  }
}

std::string unlocked_server_warning(const std::string& command, const std::vector<int>& server_gpus,
                                    const std::vector<int>& sandbox_gpus) {
  const std::string program = command.substr(0, command.find(' '));
  if (std::filesystem::path(program).filename() == "kforge") return "";
  for (int g : server_gpus)
    if (std::find(sandbox_gpus.begin(), sandbox_gpus.end(), g) != sandbox_gpus.end())
      return "; WARNING: they share GPU " + std::to_string(g) +
             " with the sandbox and, not being kforge serve, do not yield it to timed trials: timings "
             "there will be disturbed (give the sandbox_worker's gpu_group other GPUs)";
  return "";
}

std::string logic_description(actor_kind k, const manifest* m) {
  switch (k) {
    case actor_kind::task_generator:
      if (m && m->tasks.source == task_source_kind::stand_in)
        return "stand-in: synthetic elementwise tasks (tasks.source = \"stand-in\"; \"builtin\" "
               "runs the real task generator)";
    {
      const bool builtin = !(m && m->tasks.source == task_source_kind::files);
      const std::size_t files = m ? m->tasks.files.size() : 0;
      std::string d = builtin ? "real: built-in task library" : "real:";
      if (files > 0) d += std::string(builtin ? " + " : " ") + std::to_string(files) + " task file(s)";
      d += m && m->tasks.sampling == task_sampling::uniform ? ", uniform sampling"
                                                            : ", curriculum from reward feedback";
      return d + ", prompts from the template";
    }
    case actor_kind::sampler:
      if (m && !m->sampler.model.empty())
        return m->sampler.backend == sampler_backend::engine
                   ? "real: LibTorch engine over " + m->sampler.model
                   : openai_servers(*m);
      return "stand-in: synthetic candidates (sampler.model is empty; a checkpoint directory "
             "runs the LibTorch engine)";
    case actor_kind::sandbox_pool:
      return "real: load-balancing broker with heartbeats and re-queue";
    case actor_kind::sandbox_worker:
      if (m && m->sandbox.backend == sandbox_backend::nvcc) {
        const auto gpus = stage_gpus(*m, actor_kind::sandbox_worker);
        if (!gpus) return "real, but its GPUs: " + gpus.message();
        const char* reuse = m->sandbox.reuse_verdicts == verdict_reuse_scope::off ? ""
                            : m->sandbox.reuse_verdicts == verdict_reuse_scope::group
                                ? "; a group's repeated kernels judged once"
                                : "; a kernel judged once per prompt in the run";
        const std::string what = gpus->empty() ? "real: static checks + nvcc, COMPILE-ONLY (no GPU in the "
                                                 "group): verdict `compiled` at best"
                                               : "real: static checks, nvcc, verification and timing on GPU(s)";
        return what + reuse;
      }
      return "stand-in: synthetic verdicts, nothing compiled or run (sandbox.backend = "
             "\"stand-in\"; \"nvcc\" runs the real sandbox)";
    case actor_kind::reward:
      return "real: correctness + speedup reward with the two-level baseline";
    case actor_kind::buffer:
      return "real: dedup, staleness bound, whole GRPO groups";
    case actor_kind::trainer:
      if (m && !m->sampler.model.empty()) {
#if defined(KFORGE_MODEL_WITH_TORCH)
        // What make_trainer builds from the same manifest: its devices and compute dtype.
        const auto o = policy_trainer_stage_options_from(*m, "");
        if (!o) return "real, but " + o.message();
        const bool on_gpus = o->devices.front() >= 0;
        const std::size_t ranks = o->devices.size();
        return "real: GRPO with adaptive KL on " + m->sampler.model +
               (m->trainer.baseline == group_baseline::draws ? " (group baseline: every draw)" : "") +
               ", data parallel over " +
               std::to_string(ranks) + (on_gpus ? " GPU(s)" : " CPU rank(s)") +
               (ranks > 1 ? std::string(" (gradients summed each step") +
                                (m->trainer.ranks == trainer_ranks::processes ? ", a process per rank)" : ")")
                          : std::string()) +
               ", " +
               (m->trainer.lora.enabled
                    ? "LoRA rank " + std::to_string(m->trainer.lora.rank) + " on a frozen " +
                          (o->bf16_compute ? "bf16" : "fp32") + " base (fp32 adapters)"
                    : std::string(o->bf16_compute ? "bf16 compute on fp32 master weights" : "fp32")) +
               (m->trainer.activation_checkpointing ? ", layers recomputed in backward" : "") +
               (o->publish_ranks > 0 ? ", weights published by NCCL broadcast to " +
                                           std::to_string(o->publish_ranks - 1) + " sampler(s)"
                                     : ", weights published by file (" + o->publish_reason + ")");
#else
        return "unavailable: sampler.model is set, but this kforge was built without the LibTorch model";
#endif
      }
      return "stand-in: publishes version+1 per batch, trains nothing (sampler.model is empty: "
             "nothing to train)";
  }
  return "unknown";
}

}  // namespace kforge::pipeline

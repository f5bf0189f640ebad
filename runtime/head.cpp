#include "runtime/head.hpp"

#include <unistd.h>

#include <algorithm>
#include <optional>
#include <ostream>
#include <sstream>
#include <vector>

#include "common/log.hpp"
#include "config/manifest.hpp"
#include "runtime/episode_token_limit.hpp"
#include "runtime/head_run.hpp"
#include "runtime/memory_plan.hpp"
#include "runtime/host_check.hpp"
#include "runtime/process_runtime.hpp"
#include "runtime/readiness.hpp"
#include "runtime/run_directory.hpp"
#include "runtime/slurm_launch.hpp"
#include "stages/stage_factory.hpp"
#include "stages/task_generator.hpp"

namespace kforge::pipeline {

int worker_command(const worker_command_options& opt, std::ostream& err) {
  auto m = load_manifest(opt.manifest);
  if (!m) {
    err << "kforge worker: " << m.message() << "\n";
    return 2;
  }
  if (opt.steps) m->run.steps = *opt.steps;
  // As in the head: the stages' files (compile cache, weights) go to the run directory in use.
  if (opt.run_dir) m->run.run_dir = *opt.run_dir;
  bound_episode_tokens(*m);
  runtime_options ro;
  ro.run_dir = m->run.run_dir;
  if (opt.resume_step && opt.resume_checkpoint)
    ro.resume = resume_point{*opt.resume_step, *opt.resume_checkpoint};
  auto rt = process_runtime::create(*m, opt.process, ro);
  // From here on the process's stderr is its log (RUN_DIR/logs/PROCESS.log): lines with a time
  // and a level, the last one saying why it stopped (the head quotes it).
  if (!rt) {
    kforge::log::error("kforge worker: " + rt.message());
    return 1;
  }
  kforge::log::info("kforge worker: process " + opt.process + " running (pid " + std::to_string(::getpid()) + ")");
  auto s = (*rt)->run();
  if (!s) {
    kforge::log::error("kforge worker: " + s.message());
    return 1;
  }
  kforge::log::info("kforge worker: process " + opt.process + " shut down");
  return 0;
}

namespace {

/// The manifest a run uses and where it starts: --resume's snapshot and checkpoint, or --manifest
/// (the embedded default without it) with the command line's overrides. An error is a usage error.
struct run_plan {
  manifest m;
  std::optional<resume_point> resume;
  std::optional<slurm_launch> slurm;
};

result<run_plan> plan_run(const run_command_options& opt) {
  if (opt.steps && *opt.steps < 1) return error{"--steps must be >= 1, got " + std::to_string(*opt.steps)};
  if (opt.time_limit_s && !(*opt.time_limit_s >= 0)) {
    std::ostringstream s;
    s << "--time-limit must be >= 0 seconds (0: none), got " << *opt.time_limit_s;
    return error{s.str()};
  }
  if (opt.launcher && *opt.launcher != "slurm")
    return error{"--launcher must be slurm, got \"" + *opt.launcher + "\""};
  run_plan plan;
  if (opt.resume && opt.launcher)
    return error{"--resume with --launcher slurm is not supported: the run's manifest snapshot names "
                 "the nodes of the allocation it first ran on; resume it inside an allocation of "
                 "those nodes without --launcher, starting the other nodes' workers by hand"};
  if (opt.resume) {
    if (opt.manifest || opt.run_dir)
      return error{"--resume continues a run with its own manifest and directory; drop "
                   "--manifest and --run-dir"};
    auto r = open_resumed_run(*opt.resume, opt.steps);
    if (!r) return r.err();
    plan.m = std::move(r->m);
    plan.resume = std::move(r->at);
  } else if (opt.launcher) {
    // The file's node names and the links between them get the allocation's nodes and ports.
    auto placed = opt.manifest ? place_file_on_slurm(*opt.manifest)
                               : place_on_slurm(default_manifest_text(), "<default manifest>");
    if (!placed) return placed.err();
    plan.m = placed->placed.m;
    plan.slurm = std::move(*placed);
    if (opt.steps) plan.m.run.steps = *opt.steps;
    if (opt.run_dir) plan.m.run.run_dir = *opt.run_dir;
  } else {
    auto loaded = opt.manifest ? load_manifest(*opt.manifest) : default_manifest();
    if (!loaded) return loaded.err();
    plan.m = std::move(*loaded);
    if (opt.steps) plan.m.run.steps = *opt.steps;
    if (opt.run_dir) plan.m.run.run_dir = *opt.run_dir;
  }
  if (opt.progress) plan.m.run.progress = *opt.progress;
  if (opt.time_limit_s) plan.m.run.time_limit_s = *opt.time_limit_s;
  bound_episode_tokens(plan.m);
  return plan;
}

/// The memory plan (memory_plan.hpp) of a real policy on GPUs: printed, and a plan that does not
/// fit the GPUs it will run on is the reason the run stops. Nothing for the stand-in policy, a
/// policy on the CPU, or a model whose config cannot be read here (host_checks says so).
std::optional<std::string> memory_plan_problem(const manifest& m, const host_facts& host, std::ostream& out) {
  if (m.sampler.model.empty() || m.sampler.backend != sampler_backend::engine) return std::nullopt;
  auto shape = policy_shape_of(m.sampler.model);
  if (!shape) return std::nullopt;
  const auto sampler_gpus = stage_gpus(m, actor_kind::sampler);
  const auto trainer_gpus = stage_gpus(m, actor_kind::trainer);
  if (!sampler_gpus || !trainer_gpus || (sampler_gpus->empty() && trainer_gpus->empty())) return std::nullopt;
  const auto seq = planned_sequence_tokens(m.sampler, m.agent);
  const auto sampler = sampler_memory(*shape, m.sampler, seq, m.agent);
  // The ranks optimiser state may be sharded over: one per GPU of the trainer's group, and those
  // joining from other hosts.
  const auto ranks = static_cast<std::int64_t>(std::max<std::size_t>(1, trainer_gpus->size())) + m.trainer.remote_ranks;
  const auto trainer = trainer_memory(*shape, m.trainer, seq, ranks);
  const bool shared = !sampler_gpus->empty() && !trainer_gpus->empty() && sampler_gpus->front() == trainer_gpus->front();
  // Candidate children on the sampler's GPU (the default's rollout group) take from the same memory.
  const auto sandbox_gpus = stage_gpus(m, actor_kind::sandbox_worker);
  const bool sandbox_shares = sandbox_gpus && !sampler_gpus->empty() &&
                              std::find(sandbox_gpus->begin(), sandbox_gpus->end(), sampler_gpus->front()) != sandbox_gpus->end();
  double gpu = 0;  // the smallest GPU either stage uses, where nvidia-smi said
  for (const auto* g : {&*sampler_gpus, &*trainer_gpus})
    for (int i : *g)
      if (i >= 0 && static_cast<std::size_t>(i) < host.gpu_memory.size())
        gpu = gpu == 0 ? host.gpu_memory[static_cast<std::size_t>(i)] : std::min(gpu, host.gpu_memory[static_cast<std::size_t>(i)]);
  const auto verdict = judge_memory(sampler, trainer, shared, gpu, 0.1,
                                    sandbox_shares ? sandbox_memory(m.sandbox.runners_per_gpu) : memory_estimate{});
  out << "memory plan (an estimate from " << m.sampler.model << "/config.json, " << shape->parameters()
      << " parameters, sequences of up to " << seq << " tokens: a prompt of " << planned_prompt_tokens
      << (m.agent.max_turns > 1 ? " and " + std::to_string(m.agent.max_turns) + " turns with observations" : " and a completion")
      << "):\n" << verdict.text << "\n\n";
  if (verdict.fits) return std::nullopt;
  return "the memory plan does not fit the GPUs (above)";
}

/// The run's episode rules in one line: turns, the context bound, the reward.
std::string episodes_line(const agent_options& a) {
  std::ostringstream o;
  o << "episodes: up to " << a.max_turns << " turns; ";
  if (a.max_tokens > 0)
    o << "no next turn from " << a.max_tokens << " tokens of context or more (before its observation)";
  else
    o << "no bound on their context (agent.max_tokens = 0)";
  o << "; reward " << episode_reward_name(a.reward);
  if (a.reward == episode_reward_kind::discounted || a.reward == episode_reward_kind::turn_returns)
    o << " (discount " << a.discount << ")";
  return o.str();
}

/// Prints the plan and what each stage needs on this host (with --check, the host's checks too),
/// then makes the checks that stop a run before any process starts. Returns the exit code when the
/// run ends here (always with --check), nullopt when it may start; `stand_ins` says whether stand-ins run.
std::optional<int> announce_and_check(const run_plan& plan, bool check_only, bool& stand_ins,
                                      std::ostream& out, std::ostream& err) {
  const auto& m = plan.m;
  out << "kforge run: manifest " << m.source << "\n";
  if (plan.slurm) print_placement(*plan.slurm, out);
  out << m.summary() << "\n";
  if (plan.resume)
    out << "resuming at step " << plan.resume->step << " of " << m.run.steps << " from "
        << plan.resume->checkpoint << "\n" << dedup_left_out_note(m) << "\n";
  if (m.agent.max_turns > 1) out << episodes_line(m.agent) << "\n";
  const auto host = probe_host();
  out << readiness_report(m, host) << "\n";
  const auto needs = check_only ? host_checks(m, host) : std::vector<host_check>{};
  if (check_only) out << "checks:\n" << format_host_checks(needs) << "\n";
  if (auto problem = memory_plan_problem(m, host, out)) {
    err << "kforge run: " << *problem << "\n";
    return 2;
  }
  stand_ins = false;
  for (auto k : all_actor_kinds) stand_ins = stand_ins || (is_stand_in(k, &m) && m.count(k) > 0);
  if (stand_ins)
    out << "NOTE: stand-ins run in place of the stages not built yet (marked above); what they\n"
           "send is synthetic. The topology, bus, actors, recordings, metrics and the stages\n"
           "marked \"real\" are real. Nothing is trained on while the trainer is a stand-in.\n\n";
  // A sampler this host will run is refused where it would be on the CPU against
  // sampler.require_gpu (one on another node checks its own host).
  bool samplers_here = true;
  for (const auto* p : m.hosts(actor_kind::sampler)) samplers_here = samplers_here && p->is_local();
  if (auto s = samplers_here ? check_sampler_gpu(m) : status{}; !s) {
    err << "kforge run: " << s.message() << "\n";
    return 2;
  }
  // The task pool is loaded here as well as in its process, so a bad task file or prompt template
  // stops the run before anything starts. Only for a generator on this host: a remote node reads
  // its own files. The check asks no GPU: the generator does that once, when it starts.
  for (const auto* p : m.hosts(actor_kind::task_generator)) {
    if (!p->is_local() || m.tasks.source == task_source_kind::stand_in) continue;
    if (auto s = check_task_generator(m); !s) {
      err << "kforge run: " << m.source << ": " << s.message() << "\n";
      return 2;
    }
  }
  if (check_only) return all_passed(needs) ? 0 : 2;
  return std::nullopt;
}

}  // namespace

int run_command(const run_command_options& opt, std::ostream& out, std::ostream& err) {
  auto plan = plan_run(opt);
  if (!plan) {
    err << "kforge run: " << plan.message() << "\n";
    return 2;
  }
  bool stand_ins = false;
  if (auto code = announce_and_check(*plan, opt.check_only, stand_ins, out, err)) return *code;
  const bool overridden = opt.steps || opt.run_dir || plan->resume;
  auto snapshot = prepare_run_directory(plan->m, overridden, plan->resume);
  if (!snapshot) {
    err << "kforge run: " << snapshot.message() << "\n";
    return 2;
  }
  head_run run(std::move(plan->m), plan->resume, *snapshot, stand_ins, out, err);
  if (plan->slurm) run.start_remote_processes_with(slurm_steps(*plan->slurm));
  if (const int code = run.launch(); code != 0) return code;
  run.monitor();
  run.drain();
  run.checkpoint();
  run.shut_down();
  return run.summarize();
}

}  // namespace kforge::pipeline

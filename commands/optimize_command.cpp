#include "commands/optimize_command.hpp"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iomanip>
#include <map>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <ostream>
#include <thread>

#include "agent/episode.hpp"
#include "agent/observation.hpp"
#include "commands/optimize_outputs.hpp"
#include "common/hash.hpp"
#include "common/parallel.hpp"
#include "model/config.hpp"
#include "sandbox/eval_command.hpp"
#include "sandbox/pool.hpp"
#include "sandbox/repeat_verdicts.hpp"
#include "sandbox/verdict_encoding.hpp"
#include "sandbox/verdict_json.hpp"
#include "stages/engine_sampler.hpp"
#include "tasks/builtin.hpp"
#include "tasks/measured_baselines.hpp"
#include "tasks/prompt.hpp"
#include "tasks/task_parser.hpp"

namespace kforge::pipeline {

namespace fs = std::filesystem;

namespace {

/// The tasks: --tasks' file (or the library), or --task's one (a built-in id, or a task file with
/// one task or --task-id's among several).
result<std::vector<tasks::task>> load_tasks(const optimize_options& o) {
  if (!o.tasks.empty()) {
    auto all = o.tasks == "builtin" ? tasks::builtin_tasks() : tasks::load_task_file(o.tasks);
    if (all && all->empty()) return error{"--tasks " + o.tasks + " holds no task"};
    return all;
  }
  const bool file = fs::exists(o.task) && !fs::is_directory(o.task);
  auto all = file ? tasks::load_task_file(o.task) : tasks::builtin_tasks();
  if (!all) return all.err();
  const std::string want = file ? o.task_id : o.task;
  if (file && want.empty()) {
    if (all->size() == 1) return all;
    return error{"--task " + o.task + " holds " + std::to_string(all->size()) + " tasks: pick one with --task-id"};
  }
  for (auto& t : *all)
    if (t.id == want) return std::vector<tasks::task>{std::move(t)};
  return error{file ? "--task-id " + want + ": not in " + o.task
                    : "--task " + want + ": no built-in task of that id, and no such file"};
}

status check(const optimize_options& o) {
  if (o.task.empty() == o.tasks.empty()) return error{"give one of --task (one task) and --tasks (every task of a file)"};
  if (!o.task_id.empty() && o.task.empty()) return error{"--task-id picks a task of --task's file"};
  if (o.out.empty()) return error{"--out is required"};
  if (o.turns < 1 || o.turns > 64) return error{"--turns must be 1-64, got " + std::to_string(o.turns)};
  if (o.samples < 1 || o.samples > 256) return error{"--samples must be 1-256, got " + std::to_string(o.samples)};
  if (o.max_new_tokens < 1) return error{"--max-new-tokens must be >= 1"};
  if (o.batch < 1 || o.batch > 4096) return error{"--batch must be 1-4096, got " + std::to_string(o.batch)};
  if (o.jobs < 0) return error{"--jobs must be >= 0"};
  if (fs::exists(fs::path(o.out) / "report.md")) return error{"--out " + o.out + " already holds a report"};
  return {};
}

/// The episodes' token limit: --max-tokens, else the checkpoint's context less one turn.
result<std::size_t> episode_token_limit(const optimize_options& o) {
  if (o.max_tokens > 0) return o.max_tokens;
  auto config = model::load_model_config((fs::path(o.model) / "config.json").string());
  if (!config) return config.err();
  auto limit = model::turn_context_limit(*config, o.max_new_tokens);
  if (!limit) return error{"--max-new-tokens: " + limit.message()};
  return limit;
}

/// The compile / eager ratios of --baselines for the sandbox's GPU (kforge eval's rule: only times
/// measured on this GPU model count), saying how many of the tasks have one.
std::map<std::string, double> compile_ratios_for(const tasks::measured_baselines& b, const std::vector<tasks::task>& ts,
                                                 const sandbox::sandbox_pool& pool, std::ostream& out) {
  const std::string device = pool.device_name();
  if (device.empty()) {
    out << "kforge optimize: --baselines: no GPU runs the kernels, so there are no speedups to set against torch.compile\n";
    return {};
  }
  const auto ratios = b.compile_ratios(device);
  std::size_t with = 0;
  for (const auto& t : ts) with += ratios.count(t.id);
  out << "kforge optimize: --baselines: " << with << " of " << ts.size() << " task(s) have a torch.compile time measured on "
      << device << " in " << b.file;
  if (with == 0) {
    out << "; it holds devices:";
    for (const auto& d : b.devices()) out << " \"" << d << "\"";
  }
  out << "\n";
  return ratios;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// The pieces one run of the loop shares.
struct loop {
  const optimize_options& o;
  sandbox::sandbox_pool& sandbox;
  engine_policy& policy;
  const agent::observation_template& observations;
  agent::feedback_kinds kinds;
  gpu_facts gpu;
  int jobs;
  std::vector<episode_run> runs;
  sandbox::repeat_verdicts repeats{1 << 16};
  double generate_s = 0, judge_s = 0;  ///< the last turn's

  /// One turn of every episode still going: generate (in batches), judge, score, observe.
  status turn(int t) {
    std::vector<std::size_t> live;
    for (std::size_t k = 0; k < runs.size(); ++k)
      if (!runs[k].ep.done()) live.push_back(k);
    if (live.empty()) return {};
    auto t0 = std::chrono::steady_clock::now();
    std::vector<engine_policy::continuation> conts;
    for (std::size_t first = 0; first < live.size(); first += static_cast<std::size_t>(o.batch)) {
      std::vector<std::vector<std::int32_t>> contexts;
      std::vector<std::uint64_t> seeds;
      for (std::size_t i = first; i < std::min(live.size(), first + static_cast<std::size_t>(o.batch)); ++i) {
        const auto& r = runs[live[i]];
        contexts.push_back(r.ep.context());
        const std::uint64_t parts[4] = {o.seed, fnv1a64(r.task->id.data(), r.task->id.size()), r.index,
                                        static_cast<std::uint64_t>(t)};
        seeds.push_back(fnv1a64(parts, sizeof parts));
      }
      auto batch = policy.continue_each(contexts, seeds, o.temperature, o.top_p, o.max_new_tokens);
      if (!batch) return batch.err();
      for (auto& c : *batch) conts.push_back(std::move(c));
    }
    generate_s = seconds_since(t0);
    // The candidate children judge on this GPU: generation's cache (key/value caches of a turn of
    // many long episodes, tens of GiB) goes back first, else they run out of memory (infra_error).
    policy.release_cached_memory();
    t0 = std::chrono::steady_clock::now();
    std::vector<wire::VerdictT> verdicts(live.size());
    parallel_for(live.size(), std::min(jobs, static_cast<int>(live.size())), [&](std::size_t i) {
      const auto& task = *runs[live[i]].task;
      const std::string source = candidate_source(conts[i].text);
      // As `kforge eval` judges: the same --seed checks both on the same inputs.
      auto v = sandbox::judge_for_task(sandbox, task, source, o.seed, o.reuse_repeats ? &repeats : nullptr);
      if (v) {
        verdicts[i] = std::move(*v);
      } else {
        verdicts[i].status = wire::VerdictStatus::infra_error;
        verdicts[i].reason = v.message();
      }
    });
    judge_s = seconds_since(t0);
    for (std::size_t i = 0; i < live.size(); ++i) record(runs[live[i]], t, std::move(conts[i]), verdicts[i]);
    return {};
  }

  void record(episode_run& r, int t, engine_policy::continuation c, wire::VerdictT& v) {
    const std::string source = candidate_source(c.text);
    const bool correct = v.status == wire::VerdictStatus::ok;
    const double speedup = sandbox::speedup_of(v);  // 0 unless correct
    const double best_before = r.ep.best_speedup();
    r.transcript += "## Turn " + std::to_string(t) + ": the model\n\n" + c.text + "\n\n";
    (void)r.ep.add_completion(std::move(c.tokens), std::move(c.logprobs));
    (void)r.ep.score(speedup, correct, speedup);
    auto j = sandbox::verdict_json(v);
    j["turn"] = t;
    r.verdicts.push_back(j);
    r.sources.push_back(source);
    v.candidate = std::make_unique<wire::CandidateT>();
    v.candidate->source = source;
    agent::turn_context ctx;
    ctx.turn = t;
    ctx.max_turns = o.turns;
    ctx.best_speedup = best_before;
    ctx.gpu = gpu;
    ctx.profile = sandbox::profile_of(v);  // where the sandbox took one ([sandbox] profile)
    const std::string text = observations.render(v, ctx, kinds);
    r.transcript += text + "\n";
    if (!r.ep.done()) (void)r.ep.observe(policy.follow_up_ids(text, r.ep.turns().back().completion));
  }

  /// After turn t: how many episodes (and tasks) have a correct kernel, how many go on, and what
  /// the turn took.
  void say(int t, std::size_t tasks, std::ostream& out) const {
    int live = 0, correct = 0, solved = 0;
    const tasks::task* last = nullptr;
    bool task_solved = false;
    for (const auto& r : runs) {
      if (r.task != last) {
        solved += task_solved;
        task_solved = false;
        last = r.task;
      }
      live += !r.ep.done();
      correct += r.ep.best_speedup() > 0;
      task_solved = task_solved || r.ep.best_speedup() > 0;
    }
    solved += task_solved;
    out << "turn " << t << ": " << correct << " of " << runs.size() << " episode(s) with a correct kernel, " << live
        << " going on";
    if (tasks > 1) out << "; " << solved << " of " << tasks << " tasks";
    out << std::fixed << std::setprecision(1) << " (generate " << generate_s << " s, sandbox " << judge_s << " s)\n";
  }
};

}  // namespace

int optimize_command(const optimize_options& o, std::ostream& out, std::ostream& err) {
  const auto fail = [&](const std::string& why, int code = 2) {
    err << "kforge optimize: " << why << "\n";
    return code;
  };
  if (auto s = check(o); !s) return fail(s.message());
  auto tasks = load_tasks(o);
  if (!tasks) return fail(tasks.message());
  std::optional<tasks::measured_baselines> baselines;
  if (!o.baselines.empty()) {
    auto b = tasks::read_measured_baselines(o.baselines);
    if (!b) return fail("--baselines: " + b.message());
    baselines = std::move(b).value();
  }
  auto kinds = o.feedback.empty() ? result<agent::feedback_kinds>(agent::feedback_kinds{})
                                  : agent::feedback_kinds::parse(o.feedback);
  if (!kinds) return fail("--feedback: " + kinds.message());
  auto observations = o.observation_template.empty()
                          ? result<agent::observation_template>(agent::observation_template::embedded())
                          : agent::observation_template::load(o.observation_template);
  if (!observations) return fail(observations.message());
  auto token_limit = episode_token_limit(o);
  if (!token_limit) return fail(token_limit.message());

  sandbox::pool_options po;
  po.eval.compile.arch = o.arch;
  po.eval.compile.cache_dir = sandbox::default_compile_cache();
  po.compile_only = o.compile_only;
  po.work_dir = po.eval.compile.cache_dir;
  // Profiles where the observations show them, as [sandbox] profile = "episodes" in a run.
  po.run.profile = o.turns > 1 && kinds->profile;
  po.run.ncu = o.ncu;
  std::error_code ec;
  fs::create_directories(po.work_dir, ec);
  auto pool = sandbox::sandbox_pool::create(po);
  if (!pool) return fail("the sandbox: " + pool.err().message);
  const gpu_facts gpu = (*pool)->facts().value_or(gpu_facts{});

  engine_sampler_options eo;
  eo.sampler.model = o.model;
  eo.device = o.gpu;
  eo.seed = o.seed;
  auto policy = load_engine_policy(eo);
  if (!policy) return fail(policy.message());

  agent::episode_options epo;
  epo.max_turns = o.turns;
  epo.target_speedup = o.target_speedup;
  epo.max_tokens = *token_limit;
  const int jobs = o.jobs > 0 ? o.jobs : std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1, 16);
  loop l{o, **pool, **policy, *observations, *kinds, gpu, jobs, {}};
  for (const auto& t : *tasks) {
    const std::string prompt = tasks::build_prompt(t, gpu);
    const auto prompt_ids = (*policy)->prompt_ids(prompt);
    for (int k = 0; k < o.samples; ++k)
      l.runs.push_back({&t, static_cast<std::size_t>(k), agent::episode(prompt_ids, epo),
                        "## Prompt\n\n" + prompt + "\n\n", {}, {}});
  }
  out << "kforge optimize: " << (tasks->size() == 1 ? tasks->front().id : std::to_string(tasks->size()) + " tasks")
      << ", " << o.samples << " episode(s)" << (tasks->size() == 1 ? "" : " each") << " of up to " << o.turns
      << " turn(s); " << (*pool)->describe() << "\n";
  auto compile_ratios = baselines ? compile_ratios_for(*baselines, *tasks, **pool, out) : std::map<std::string, double>{};
  for (int t = 1; t <= o.turns; ++t) {
    if (auto s = l.turn(t); !s) return fail(s.message(), 1);
    l.say(t, tasks->size(), out);
  }
  const optimize_run_facts facts{o.model, o.turns, (*pool)->runs_on_gpu(), o.baselines, std::move(compile_ratios)};
  if (auto s = write_optimize_outputs(o.out, l.runs, !o.tasks.empty(), facts, out); !s) return fail(s.message(), 1);
  out << "kforge optimize: transcripts and verdicts under " << o.out << ", summary in "
      << (fs::path(o.out) / "report.md").string() << ", verdict lines in "
      << (fs::path(o.out) / "verdicts.jsonl").string() << "\n";
  return 0;
}

}  // namespace kforge::pipeline

#include "commands/optimize_command.hpp"

#include <algorithm>
#include <filesystem>
#include <iomanip>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>

#include "agent/episode.hpp"
#include "agent/observation.hpp"
#include "common/hash.hpp"
#include "common/parallel.hpp"
#include "common/text_file.hpp"
#include "sandbox/eval_command.hpp"
#include "sandbox/pool.hpp"
#include "sandbox/verdict_encoding.hpp"
#include "sandbox/verdict_json.hpp"
#include "stages/engine_sampler.hpp"
#include "tasks/builtin.hpp"
#include "tasks/prompt.hpp"
#include "tasks/task_parser.hpp"

namespace kforge::pipeline {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

/// The task: a built-in id, or a task file with one task (or --task-id's among several).
result<tasks::task> load_task(const optimize_options& o) {
  const bool file = fs::exists(o.task) && !fs::is_directory(o.task);
  auto all = file ? tasks::load_task_file(o.task) : tasks::builtin_tasks();
  if (!all) return all.err();
  const std::string want = file ? o.task_id : o.task;
  if (file && want.empty()) {
    if (all->size() == 1) return all->front();
    return error{"--task " + o.task + " holds " + std::to_string(all->size()) + " tasks: pick one with --task-id"};
  }
  for (auto& t : *all)
    if (t.id == want) return std::move(t);
  return error{file ? "--task-id " + want + ": not in " + o.task
                    : "--task " + want + ": no built-in task of that id, and no such file"};
}

status check(const optimize_options& o) {
  if (o.task.empty()) return error{"--task is required"};
  if (o.out.empty()) return error{"--out is required"};
  if (o.turns < 1 || o.turns > 64) return error{"--turns must be 1-64, got " + std::to_string(o.turns)};
  if (o.samples < 1 || o.samples > 256) return error{"--samples must be 1-256, got " + std::to_string(o.samples)};
  if (o.max_new_tokens < 1) return error{"--max-new-tokens must be >= 1"};
  if (fs::exists(fs::path(o.out) / "report.md")) return error{"--out " + o.out + " already holds a report"};
  return {};
}

/// One episode with what the files and the report need of it.
struct episode_run {
  agent::episode ep;
  std::string transcript;
  std::vector<json> verdicts;  ///< one per turn
  std::vector<std::string> sources;
};

/// The pieces one run of the loop shares.
struct loop {
  const optimize_options& o;
  const tasks::task& task;
  sandbox::sandbox_pool& sandbox;
  engine_policy& policy;
  const agent::observation_template& observations;
  agent::feedback_kinds kinds;
  gpu_facts gpu;
  std::vector<episode_run> runs;

  /// One turn of every episode still going: generate, judge, score, observe.
  status turn(int t) {
    std::vector<std::size_t> live;
    std::vector<std::vector<std::int32_t>> contexts;
    std::vector<std::uint64_t> seeds;
    for (std::size_t k = 0; k < runs.size(); ++k) {
      if (runs[k].ep.done()) continue;
      live.push_back(k);
      contexts.push_back(runs[k].ep.context());
      const std::uint64_t parts[3] = {o.seed, k, static_cast<std::uint64_t>(t)};
      seeds.push_back(fnv1a64(parts, sizeof parts));
    }
    if (live.empty()) return {};
    auto conts = policy.continue_each(contexts, seeds, o.temperature, o.top_p, o.max_new_tokens);
    if (!conts) return conts.err();
    std::vector<wire::VerdictT> verdicts(live.size());
    parallel_for(live.size(), static_cast<int>(live.size()), [&](std::size_t i) {
      verdicts[i] = sandbox.evaluate(task, candidate_source((*conts)[i].text), o.seed);
    });
    for (std::size_t i = 0; i < live.size(); ++i) record(runs[live[i]], t, std::move((*conts)[i]), verdicts[i]);
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
    ctx.gpu = gpu.registers_per_sm > 0 ? &gpu : nullptr;
    ctx.profile = sandbox::profile_of(v);  // where the sandbox took one ([sandbox] profile)
    const std::string text = observations.render(v, ctx, kinds);
    r.transcript += text + "\n";
    if (!r.ep.done()) (void)r.ep.observe(policy.follow_up_ids(text, r.ep.turns().back().completion));
  }
};

std::string times(double x) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(2) << x << "x";
  return s.str();
}

/// Per turn: the episodes with a correct kernel by then, and the best speedup by then.
std::string report_text(const optimize_options& o, const tasks::task& t, const std::vector<episode_run>& runs,
                        bool on_gpu) {
  std::ostringstream s;
  s << "# kforge optimize: " << t.id << "\n\n"
    << runs.size() << " episode(s) of up to " << o.turns << " turn(s), model " << o.model
    << (on_gpu ? "" : "; COMPILE-ONLY: kernels were built, not run, so none is correct") << ".\n\n"
    << "| turn | episodes with a correct kernel by then | best speedup by then |\n|---|---|---|\n";
  for (int turn = 1; turn <= o.turns; ++turn) {
    int correct = 0;
    double best = 0;
    for (const auto& r : runs) {
      double b = 0;
      const auto& turns = r.ep.turns();
      for (std::size_t k = 0; k < turns.size() && k < static_cast<std::size_t>(turn); ++k)
        if (turns[k].correct) b = std::max(b, turns[k].speedup);
      correct += b > 0;
      best = std::max(best, b);
    }
    s << "| " << turn << " | " << correct << " of " << runs.size() << " | "
      << (best > 0 ? times(best) : "-") << " |\n";
  }
  s << "\n| episode | turns | statuses | ended by |\n|---|---|---|---|\n";
  for (std::size_t k = 0; k < runs.size(); ++k) {
    std::string statuses;
    for (const auto& v : runs[k].verdicts) statuses += (statuses.empty() ? "" : ", ") + v.value("status", "?");
    s << "| " << k << " | " << runs[k].ep.turns().size() << " | " << statuses << " | "
      << runs[k].ep.ended_by() << " |\n";
  }
  return s.str();
}

/// Every file of the run; the first write that fails is the error.
status write_outputs(const optimize_options& o, const tasks::task& t, const std::vector<episode_run>& runs,
                     bool on_gpu, std::ostream& out) {
  const fs::path dir(o.out);
  json best;
  for (std::size_t k = 0; k < runs.size(); ++k) {
    const fs::path ep = dir / ("episode-" + std::to_string(k));
    std::error_code ec;
    fs::create_directories(ep, ec);
    if (ec) return error{"cannot create " + ep.string() + ": " + ec.message()};
    for (std::size_t i = 0; i < runs[k].verdicts.size(); ++i) {
      const auto stem = (ep / ("turn-" + std::to_string(i + 1))).string();
      if (auto s = write_text_file_atomically(stem + ".cu", runs[k].sources[i]); !s) return s;
      if (auto s = write_text_file_atomically(stem + ".json", runs[k].verdicts[i].dump(2) + "\n"); !s) return s;
      const auto& v = runs[k].verdicts[i];
      if (v.contains("speedup") && (best.is_null() || v["speedup"].get<double>() > best["speedup"].get<double>()))
        best = {{"episode", k}, {"turn", i + 1}, {"speedup", v["speedup"]}, {"task", t.id}, {"verdict", v},
                {"file", stem + ".cu"}};
    }
    if (auto s = write_text_file_atomically((ep / "transcript.md").string(), runs[k].transcript); !s) return s;
  }
  if (!best.is_null()) {
    const auto& b = runs[best["episode"].get<std::size_t>()].sources[best["turn"].get<std::size_t>() - 1];
    if (auto s = write_text_file_atomically((dir / "best.cu").string(), b); !s) return s;
    if (auto s = write_text_file_atomically((dir / "best.json").string(), best.dump(2) + "\n"); !s) return s;
    out << "kforge optimize: best kernel " << (dir / "best.cu").string() << ": episode " << best["episode"]
        << ", turn " << best["turn"] << ", " << std::fixed << std::setprecision(2) << best["speedup"].get<double>()
        << "x the baseline\n";
  } else {
    out << "kforge optimize: no correct kernel" << (on_gpu ? "" : " (compile-only: nothing was run)") << "\n";
  }
  return write_text_file_atomically((dir / "report.md").string(), report_text(o, t, runs, on_gpu));
}

}  // namespace

int optimize_command(const optimize_options& o, std::ostream& out, std::ostream& err) {
  const auto fail = [&](const std::string& why, int code = 2) {
    err << "kforge optimize: " << why << "\n";
    return code;
  };
  if (auto s = check(o); !s) return fail(s.message());
  auto task = load_task(o);
  if (!task) return fail(task.message());
  auto kinds = o.feedback.empty() ? result<agent::feedback_kinds>(agent::feedback_kinds{})
                                  : agent::feedback_kinds::parse(o.feedback);
  if (!kinds) return fail("--feedback: " + kinds.message());
  auto observations = o.observation_template.empty()
                          ? result<agent::observation_template>(agent::observation_template::embedded())
                          : agent::observation_template::load(o.observation_template);
  if (!observations) return fail(observations.message());

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

  const std::string prompt = tasks::build_prompt(*task, gpu);
  agent::episode_options epo;
  epo.max_turns = o.turns;
  epo.target_speedup = o.target_speedup;
  const auto prompt_ids = (*policy)->prompt_ids(prompt);
  loop l{o, *task, **pool, **policy, *observations, *kinds, gpu, {}};
  for (int k = 0; k < o.samples; ++k) l.runs.push_back({agent::episode(prompt_ids, epo), "## Prompt\n\n" + prompt + "\n\n", {}, {}});
  out << "kforge optimize: " << task->id << ", " << o.samples << " episode(s) of up to " << o.turns
      << " turn(s); " << (*pool)->describe() << "\n";
  for (int t = 1; t <= o.turns; ++t) {
    if (auto s = l.turn(t); !s) return fail(s.message(), 1);
    int live = 0, correct = 0;
    for (const auto& r : l.runs) {
      live += !r.ep.done();
      correct += r.ep.best_speedup() > 0;
    }
    out << "turn " << t << ": " << correct << " of " << o.samples << " episode(s) with a correct kernel, "
        << live << " going on\n";
  }
  if (auto s = write_outputs(o, *task, l.runs, (*pool)->runs_on_gpu(), out); !s) return fail(s.message(), 1);
  out << "kforge optimize: transcripts and verdicts under " << o.out << ", summary in "
      << (fs::path(o.out) / "report.md").string() << "\n";
  return 0;
}

}  // namespace kforge::pipeline

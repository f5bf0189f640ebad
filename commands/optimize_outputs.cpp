#include "commands/optimize_outputs.hpp"

#include <algorithm>
#include <filesystem>
#include <iomanip>
#include <optional>
#include <sstream>

#include "common/text_file.hpp"
#include "sandbox/eval_against_compile.hpp"

namespace kforge::pipeline {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string times(double x) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(2) << x << "x";
  return s.str();
}

/// One task's episodes by the end of turn `turn`: how many had a correct kernel, and the best speedup.
struct by_turn {
  int episodes_correct = 0;
  double best = 0;
};

by_turn progress(const std::vector<const episode_run*>& runs, int turn) {
  by_turn p;
  for (const auto* r : runs) {
    double b = 0;
    const auto& turns = r->ep.turns();
    for (std::size_t k = 0; k < turns.size() && k < static_cast<std::size_t>(turn); ++k)
      if (turns[k].correct) b = std::max(b, turns[k].speedup);
    p.episodes_correct += b > 0;
    p.best = std::max(p.best, b);
  }
  return p;
}

/// compile_ms / eager_ms of task `id` on this GPU, where --baselines measured it.
std::optional<double> compile_ratio(const optimize_run_facts& f, const std::string& id) {
  const auto r = f.compile_ratios.find(id);
  if (r == f.compile_ratios.end()) return std::nullopt;
  return r->second;
}

/// A best speedup over eager, and over torch.compile where the task has a compile time: "1.20x"
/// or "1.20x (1.05x torch.compile)"; "-" for none.
std::string best_cell(const optimize_run_facts& f, const std::string& id, double best) {
  if (best <= 0) return "-";
  const auto r = compile_ratio(f, id);
  return times(best) + (r ? " (" + times(best * *r) + " torch.compile)" : "");
}

std::string header(const optimize_run_facts& f, std::size_t episodes, const std::string& what) {
  std::ostringstream s;
  s << "# kforge optimize: " << what << "\n\n"
    << episodes << " episode(s) of up to " << f.turns << " turn(s), model " << f.model
    << (f.on_gpu ? "" : "; COMPILE-ONLY: kernels were built, not run, so none is correct") << ".\n\n";
  if (!f.baselines.empty() && f.on_gpu)
    s << "Speedups are over eager PyTorch; in brackets over torch.compile, from the compile times of "
      << f.baselines << " measured on this GPU (only the ratio of its compile and eager times is used).\n\n";
  return s.str();
}

/// Per turn: the episodes with a correct kernel by then, and the best speedup by then; then each
/// episode's statuses.
std::string task_report(const optimize_run_facts& f, const tasks::task& t, const std::vector<const episode_run*>& runs) {
  std::ostringstream s;
  s << header(f, runs.size(), t.id)
    << "| turn | episodes with a correct kernel by then | best speedup by then |\n|---|---|---|\n";
  for (int turn = 1; turn <= f.turns; ++turn) {
    const auto p = progress(runs, turn);
    s << "| " << turn << " | " << p.episodes_correct << " of " << runs.size() << " | " << best_cell(f, t.id, p.best)
      << " |\n";
  }
  if (!f.baselines.empty() && f.on_gpu && !compile_ratio(f, t.id))
    s << "\nNo torch.compile time for " << t.id << " on this GPU in " << f.baselines << ".\n";
  s << "\n| episode | turns | statuses | ended by |\n|---|---|---|---|\n";
  for (const auto* r : runs) {
    std::string statuses;
    for (const auto& v : r->verdicts) statuses += (statuses.empty() ? "" : ", ") + v.value("status", "?");
    s << "| " << r->index << " | " << r->ep.turns().size() << " | " << statuses << " | " << r->ep.ended_by() << " |\n";
  }
  return s.str();
}

/// Over tasks, per turn: the tasks with a correct kernel by then and the mean of their best
/// speedups by then (a task without one adds 0).
std::string turn_table(const optimize_run_facts& f, const std::vector<std::vector<const episode_run*>>& tasks) {
  std::ostringstream s;
  s << "| turn | tasks with a correct kernel by then | mean best speedup by then (none = 0) |\n|---|---|---|\n";
  for (int turn = 1; turn <= f.turns; ++turn) {
    int solved = 0;
    double sum = 0;
    for (const auto& runs : tasks) {
      const auto p = progress(runs, turn);
      solved += p.best > 0;
      sum += p.best;
    }
    s << "| " << turn << " | " << solved << " of " << tasks.size() << " | "
      << times(tasks.empty() ? 0.0 : sum / static_cast<double>(tasks.size())) << " |\n";
  }
  return s.str();
}

/// turn_table, then a row per task.
std::string summary_report(const optimize_run_facts& f, const std::vector<std::vector<const episode_run*>>& tasks,
                           std::size_t episodes) {
  std::ostringstream s;
  s << header(f, episodes, std::to_string(tasks.size()) + " tasks") << turn_table(f, tasks)
    << "\n| task | episodes with a correct kernel | best speedup |\n|---|---|---|\n";
  for (const auto& runs : tasks) {
    const auto p = progress(runs, f.turns);
    s << "| " << runs.front()->task->id << " | " << p.episodes_correct << " of " << runs.size() << " | "
      << best_cell(f, runs.front()->task->id, p.best) << " |\n";
  }
  return s.str();
}

/// One task's files under `dir`; its verdict lines appended to `lines`.
status write_task(const fs::path& dir, const optimize_run_facts& f, const std::vector<const episode_run*>& runs,
                  const fs::path& root, std::string& lines, std::ostream& out) {
  const auto& t = *runs.front()->task;
  json best;
  for (const auto* r : runs) {
    const fs::path ep = dir / ("episode-" + std::to_string(r->index));
    std::error_code ec;
    fs::create_directories(ep, ec);
    if (ec) return error{"cannot create " + ep.string() + ": " + ec.message()};
    for (std::size_t i = 0; i < r->verdicts.size(); ++i) {
      const auto stem = (ep / ("turn-" + std::to_string(i + 1))).string();
      if (auto s = write_text_file_atomically(stem + ".cu", r->sources[i]); !s) return s;
      const auto& v = r->verdicts[i];
      if (auto s = write_text_file_atomically(stem + ".json", v.dump(2) + "\n"); !s) return s;
      json line = v;
      line["task"] = t.id;
      line["category"] = std::string(tasks::to_string(t.category));
      line["episode"] = r->index;
      line["file"] = fs::relative(stem + ".cu", root).string();
      sandbox::add_speedup_vs_compile(line, f.compile_ratios);
      lines += line.dump() + "\n";
      if (v.contains("speedup") && (best.is_null() || v["speedup"].get<double>() > best["speedup"].get<double>()))
        best = {{"episode", r->index}, {"turn", i + 1}, {"speedup", v["speedup"]}, {"task", t.id}, {"verdict", v},
                {"file", stem + ".cu"}, {"source", r->sources[i]}};
    }
    if (auto s = write_text_file_atomically((ep / "transcript.md").string(), r->transcript); !s) return s;
  }
  if (!best.is_null()) {
    const std::string source = best["source"];
    best.erase("source");
    if (const auto r = compile_ratio(f, t.id)) best["speedup_vs_compile"] = best["speedup"].get<double>() * *r;
    if (auto s = write_text_file_atomically((dir / "best.cu").string(), source); !s) return s;
    if (auto s = write_text_file_atomically((dir / "best.json").string(), best.dump(2) + "\n"); !s) return s;
    out << "kforge optimize: " << t.id << ": best kernel " << (dir / "best.cu").string() << ": episode "
        << best["episode"] << ", turn " << best["turn"] << ", " << std::fixed << std::setprecision(2)
        << best["speedup"].get<double>() << "x the baseline";
    if (best.contains("speedup_vs_compile"))
      out << " (" << best["speedup_vs_compile"].get<double>() << "x torch.compile)";
    out << "\n";
  } else {
    out << "kforge optimize: " << t.id << ": no correct kernel" << (f.on_gpu ? "" : " (compile-only: nothing was run)")
        << "\n";
  }
  return write_text_file_atomically((dir / "report.md").string(), task_report(f, t, runs));
}

}  // namespace

status write_optimize_outputs(const std::string& dir, const std::vector<episode_run>& runs, bool several_tasks,
                              const optimize_run_facts& facts, std::ostream& out) {
  std::vector<std::vector<const episode_run*>> tasks;
  for (const auto& r : runs) {
    if (tasks.empty() || tasks.back().front()->task != r.task) tasks.emplace_back();
    tasks.back().push_back(&r);
  }
  const fs::path root(dir);
  std::string lines;
  for (const auto& t : tasks)
    if (auto s = write_task(several_tasks ? root / t.front()->task->id : root, facts, t, root, lines, out); !s) return s;
  if (auto s = write_text_file_atomically((root / "verdicts.jsonl").string(), lines); !s) return s;
  if (!several_tasks) return {};
  out << turn_table(facts, tasks);
  return write_text_file_atomically((root / "report.md").string(), summary_report(facts, tasks, runs.size()));
}

}  // namespace kforge::pipeline

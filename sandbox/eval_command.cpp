#include "sandbox/eval_command.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "common/clock.hpp"
#include "common/hash.hpp"
#include "common/parallel.hpp"
#include "common/text_file.hpp"
#include "sandbox/eval_against_compile.hpp"
#include "sandbox/pool.hpp"
#include "sandbox/repeat_verdicts.hpp"
#include "sandbox/verdict_json.hpp"
#include "tasks/builtin.hpp"
#include "tasks/task_parser.hpp"

namespace kforge::sandbox {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr double fast_ps[] = {0.0, 1.0, 1.5, 2.0};

std::string fast_key(double p) {
  char key[32];
  std::snprintf(key, sizeof key, "fast_%g", p);
  return key;
}

/// A task's level as the field reports it: "l1" of "l1/relu" or "kb/l1/19_ReLU"; "" for none.
std::string level_of(const std::string& task) {
  std::size_t start = 0;
  while (start < task.size()) {
    const auto end = std::min(task.find('/', start), task.size());
    const auto part = task.substr(start, end - start);
    if (part.size() >= 2 && part[0] == 'l' && part.find_first_not_of("0123456789", 1) == std::string::npos)
      return part;
    start = end + 1;
  }
  return "";
}

/// The speedups of the correct verdicts, sorted.
std::vector<double> correct_speedups(const std::vector<const json*>& verdicts) {
  std::vector<double> out;
  for (const auto* v : verdicts)
    if (v->value("status", "") == "ok") out.push_back(v->value("speedup", 0.0));
  std::sort(out.begin(), out.end());
  return out;
}

double geomean(const std::vector<double>& xs) {
  double log_sum = 0;
  int n = 0;
  for (double x : xs)
    if (x > 0) {
      log_sum += std::log(x);
      ++n;
    }
  return n > 0 ? std::exp(log_sum / n) : 0.0;
}

double median(const std::vector<double>& sorted) {
  const auto k = sorted.size();
  if (k == 0) return 0.0;
  return k % 2 ? sorted[k / 2] : (sorted[k / 2 - 1] + sorted[k / 2]) / 2;
}

/// Per task, as KernelBench and CUDA Agent count: a task is fast_p when its best correct kernel's
/// speedup exceeds p (best of its samples), and on average over its samples (the mean of each
/// sample's 0/1); correctness alike.
json per_task(const std::vector<const json*>& verdicts) {
  std::map<std::string, std::vector<const json*>> by_task;
  for (const auto* v : verdicts) by_task[v->value("task", "")].push_back(v);
  double correct_best = 0, correct_mean = 0;
  double best[4] = {0, 0, 0, 0}, mean[4] = {0, 0, 0, 0};
  for (const auto& [task, vs] : by_task) {
    double top = -1, ok = 0, fast[4] = {0, 0, 0, 0};
    for (const auto* v : vs) {
      if (v->value("status", "") != "ok") continue;
      const double s = v->value("speedup", 0.0);
      ok += 1;
      top = std::max(top, s);
      for (int i = 0; i < 4; ++i) fast[i] += s > fast_ps[i];
    }
    const double n = static_cast<double>(vs.size());
    correct_best += ok > 0;
    correct_mean += ok / n;
    for (int i = 0; i < 4; ++i) {
      best[i] += top > fast_ps[i];
      mean[i] += fast[i] / n;
    }
  }
  const double t = static_cast<double>(std::max<std::size_t>(by_task.size(), 1));
  const auto speeds = correct_speedups(verdicts);
  json fast_best = json::object(), fast_mean = json::object();
  for (int i = 0; i < 4; ++i) {
    fast_best[fast_key(fast_ps[i])] = best[i] / t;
    fast_mean[fast_key(fast_ps[i])] = mean[i] / t;
  }
  return json{{"tasks", by_task.size()},
              {"correct_best_of_samples", correct_best / t},
              {"correct_mean_over_samples", correct_mean / t},
              {"fast_p_best_of_samples", fast_best},
              {"fast_p_mean_over_samples", fast_mean},
              {"correct_kernels", speeds.size()},
              {"geomean_speedup", geomean(speeds)},
              {"median_speedup", median(speeds)}};
}

/// Verdicts grouped by `key` of each (an empty key: left out).
template <class Key>
json per_task_by(const std::vector<const json*>& verdicts, Key key) {
  std::map<std::string, std::vector<const json*>> groups;
  for (const auto* v : verdicts)
    if (auto k = key(*v); !k.empty()) groups[k].push_back(v);
  json out = json::object();
  for (const auto& [k, vs] : groups) out[k] = per_task(vs);
  return out;
}

}  // namespace

json summarize_verdicts(const std::vector<json>& verdicts) {
  std::map<std::string, int> counts;
  std::vector<const json*> all;
  for (const auto& v : verdicts) {
    all.push_back(&v);
    ++counts[v.value("status", "infra_error")];
  }
  const auto speedups = correct_speedups(all);
  const double n = static_cast<double>(verdicts.size());
  json fast_p = json::object();
  for (double p : fast_ps)
    fast_p[fast_key(p)] = n > 0 ? static_cast<double>(std::count_if(speedups.begin(), speedups.end(),
                                                                    [p](double s) { return s > p; })) / n
                                : 0.0;
  const int correct = static_cast<int>(speedups.size());
  return json{{"candidates", verdicts.size()},
              {"correct", correct},
              {"correctness_rate", n > 0 ? correct / n : 0.0},
              {"fast_p", fast_p},
              {"geomean_speedup", geomean(speedups)},
              {"median_speedup", median(speedups)},
              {"per_task", per_task(all)},
              {"by_level", per_task_by(all, [](const json& v) { return level_of(v.value("task", "")); })},
              {"by_category", per_task_by(all, [](const json& v) { return v.value("category", ""); })},
              {"counts", counts}};
}

std::string format_summary(const json& s) {
  std::ostringstream os;
  char buf[256];
  std::snprintf(buf, sizeof buf, "%d candidates, %d correct (%.1f%%), geomean speedup %.3fx\n",
                s.at("candidates").get<int>(), s.at("correct").get<int>(),
                100.0 * s.at("correctness_rate").get<double>(),
                s.at("geomean_speedup").get<double>());
  os << buf << "fast_p:";
  for (const auto& [k, v] : s.at("fast_p").items()) {
    std::snprintf(buf, sizeof buf, " %s=%.3f", k.c_str(), v.get<double>());
    os << buf;
  }
  os << "\n";
  auto task_line = [&](const std::string& label, const json& t) {
    std::snprintf(buf, sizeof buf, "%s%d task(s): correct %.3f best of samples, %.3f mean over samples;",
                  label.c_str(), t.at("tasks").get<int>(), t.at("correct_best_of_samples").get<double>(),
                  t.at("correct_mean_over_samples").get<double>());
    os << buf << " fast_p best of samples:";
    for (const auto& [k, v] : t.at("fast_p_best_of_samples").items()) {
      std::snprintf(buf, sizeof buf, " %s=%.3f", k.c_str(), v.get<double>());
      os << buf;
    }
    std::snprintf(buf, sizeof buf, "; correct kernels' speedup geomean %.3fx, median %.3fx\n",
                  t.value("geomean_speedup", 0.0), t.value("median_speedup", 0.0));
    os << buf;
  };
  if (s.contains("per_task")) task_line("per task: ", s.at("per_task"));
  for (const char* group : {"by_level", "by_category"})
    if (s.contains(group))
      for (const auto& [name, t] : s.at(group).items()) task_line("  " + name + ": ", t);
  os << "verdicts:";
  for (const auto& [k, v] : s.at("counts").items()) os << " " << k << "=" << v.get<int>();
  os << "\n";
  if (s.contains("reused"))
    os << s["reused"].get<std::uint64_t>() << " of the verdicts reused: repeats of a source judged for its task\n";
  return os.str();
}

result<wire::VerdictT> judge_for_task(sandbox_pool& pool, const tasks::task& t, const std::string& source,
                                      std::uint64_t seed, repeat_verdicts* repeats) {
  const std::uint64_t parts[2] = {seed, fnv1a64(t.id)};
  const auto judge = [&]() -> result<wire::VerdictT> { return pool.evaluate(t, source, fnv1a64(parts, sizeof parts)); };
  return repeats ? repeats->verdict(t.id + "\n" + source, judge) : judge();
}

std::string default_compile_cache() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/kforge/compile";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/kforge/compile";
  return "/tmp/kforge-compile-cache";
}

namespace {

/// One candidate file and the task its folder names.
struct candidate_file {
  const tasks::task* task;
  fs::path file;
};

/// DIR/<task id>/*.cu, sorted by path; task ids hold '/', so the tree is walked and each file's
/// parent path matched. An error for a file under a folder that names no task, or for none.
result<std::vector<candidate_file>> find_candidates(const std::string& dir,
                                                    const std::map<std::string, const tasks::task*>& by_id) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return error{"--candidates " + dir + " is not a directory"};
  std::vector<candidate_file> items;
  std::vector<std::string> unknown;
  for (auto it = fs::recursive_directory_iterator(dir, ec); it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (ec) break;
    if (!it->is_regular_file() || it->path().extension() != ".cu") continue;
    const std::string id = it->path().parent_path().lexically_relative(dir).generic_string();
    if (auto t = by_id.find(id); t != by_id.end())
      items.push_back({t->second, it->path()});
    else
      unknown.push_back(it->path().string());
  }
  std::sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.file < b.file; });
  if (!unknown.empty())
    return error{std::to_string(unknown.size()) + " file(s) under a folder that names no task, e.g. " +
                 unknown.front()};
  if (items.empty()) return error{"no DIR/<task id>/*.cu files under " + dir};
  return items;
}

result<std::unique_ptr<sandbox_pool>> make_eval_pool(const eval_options& opt) {
  pool_options po;
  po.eval.compile.arch = opt.arch;
  if (!opt.no_cache) po.eval.compile.cache_dir = opt.cache.empty() ? default_compile_cache() : opt.cache;
  po.gpus = opt.gpus;
  po.compile_only = opt.compile_only;
  po.runners_per_gpu = opt.runners_per_gpu;
  po.run.time_limit = std::chrono::milliseconds(opt.time_limit_ms);
  po.run.slow_cutoff = opt.slow_cutoff;
  po.run.confine = opt.confine;
  po.run.confirm_speedup = opt.confirm_speedup;
  std::error_code ec;
  if (!po.eval.compile.cache_dir.empty()) fs::create_directories(po.eval.compile.cache_dir, ec);
  po.work_dir = po.eval.compile.cache_dir.empty() ? fs::temp_directory_path().string() : po.eval.compile.cache_dir;
  return sandbox_pool::create(po);
}

/// One candidate's verdict line; a sandbox failure is an infra_error line, never an exception.
json judge_file(sandbox_pool& pool, const candidate_file& c, std::uint64_t seed, repeat_verdicts* repeats,
                const std::map<std::string, double>& compile_ratios) {
  auto source = read_text_file(c.file.string());
  json j;
  if (!source) {
    j = json{{"status", "infra_error"}, {"reason", source.err().message}};
  } else {
    try {
      const auto v = judge_for_task(pool, *c.task, *source, seed, repeats);
      j = v ? verdict_json(*v) : json{{"status", "infra_error"}, {"reason", v.message()}};
    } catch (const std::exception& e) {
      // A sandbox bug must not end the whole eval and lose the other verdicts.
      j = json{{"status", "infra_error"}, {"reason", std::string("sandbox error: ") + e.what()}};
    }
  }
  j["task"] = c.task->id;
  j["category"] = std::string(tasks::to_string(c.task->category));
  j["file"] = c.file.string();
  add_speedup_vs_compile(j, compile_ratios);
  return j;
}

bool out_of_memory(const json& verdict) {
  return verdict.value("status", "") == "infra_error" &&
         verdict.value("reason", "").find("out of memory") != std::string::npos;
}

}  // namespace

std::size_t retry_infra_alone(std::vector<json>& verdicts, const std::function<json(std::size_t)>& judge) {
  std::size_t retried = 0;
  for (std::size_t i = 0; i < verdicts.size(); ++i) {
    if (!out_of_memory(verdicts[i])) continue;
    json again = judge(i);
    again["retried_alone"] = true;
    again["first_reason"] = verdicts[i].value("reason", "");
    verdicts[i] = std::move(again);
    ++retried;
  }
  return retried;
}

int eval_command(const eval_options& opt, std::ostream& out, std::ostream& err) {
  auto loaded = opt.tasks.empty() ? tasks::builtin_tasks() : tasks::load_task_file(opt.tasks);
  if (!loaded) {
    err << "kforge eval: " << loaded.err().message << "\n";
    return 2;
  }
  std::map<std::string, const tasks::task*> by_id;
  for (const auto& t : *loaded) by_id[t.id] = &t;
  // Read before any candidate runs, so a bad file costs nothing.
  std::optional<tasks::measured_baselines> baselines;
  if (!opt.baselines.empty()) {
    auto b = tasks::read_measured_baselines(opt.baselines);
    if (!b) {
      err << "kforge eval: --baselines: " << b.message() << "\n";
      return 2;
    }
    baselines = std::move(b).value();
  }
  auto items = find_candidates(opt.candidates, by_id);
  if (!items) {
    err << "kforge eval: " << items.message() << "\n";
    return 2;
  }

  std::uint64_t seed = opt.seed;
  if (seed == 0) seed = (static_cast<std::uint64_t>(std::random_device{}()) << 32) | std::random_device{}();
  auto pool = make_eval_pool(opt);
  if (!pool) {
    err << "kforge eval: " << pool.err().message << "\n";
    return 2;
  }
  const int jobs = opt.jobs > 0 ? opt.jobs
                                : std::clamp<int>(static_cast<int>(std::thread::hardware_concurrency()), 1, 16);
  err << "kforge eval: " << items->size() << " candidate(s) of " << by_id.size() << " task(s); "
      << (*pool)->describe() << "; " << jobs << " job(s); seed " << seed << "\n";
  if (!(*pool)->runs_on_gpu())
    err << "kforge eval: COMPILE-ONLY: candidates are statically checked and compiled, not run; "
           "the best verdict is `compiled`\n";

  std::ofstream file_out;
  if (!opt.out.empty()) {
    file_out.open(opt.out, std::ios::trunc);
    if (!file_out) {
      err << "kforge eval: cannot write " << opt.out << "\n";
      return 2;
    }
  }
  std::ostream& lines = opt.out.empty() ? out : file_out;
  // Compile times count only where they were measured on this sandbox's GPU model.
  const std::string device = (*pool)->device_name();
  const std::string sandbox_described = (*pool)->describe();
  const auto compile_ratios =
      baselines && !device.empty() ? baselines->compile_ratios(device) : std::map<std::string, double>{};
  std::vector<json> verdicts(items->size());
  std::mutex write_mutex;
  repeat_verdicts repeats(items->size() + 1);
  const auto started = std::chrono::steady_clock::now();
  parallel_for(items->size(), jobs, [&](std::size_t i) {
    json j = judge_file(**pool, (*items)[i], seed, opt.reuse_repeats ? &repeats : nullptr, compile_ratios);
    std::lock_guard lock(write_mutex);
    lines << j.dump() << "\n" << std::flush;
    verdicts[i] = std::move(j);
  });
  std::size_t retried = 0;
  if (opt.retry_infra_alone && std::any_of(verdicts.begin(), verdicts.end(), out_of_memory)) {
    // The retry is each candidate alone on its GPU: one at a time, without reused verdicts, and in
    // a fresh pool, since the first pool's processes may still hold memory (on an H100 the same
    // pool's retry ran out beside one holding 56.7 GiB).
    pool->reset();
    auto fresh = make_eval_pool(opt);
    if (!fresh)
      err << "kforge eval: no fresh sandbox to judge the out-of-memory candidates again ("
          << fresh.err().message << "); their first verdicts stand\n";
    else
      retried = retry_infra_alone(verdicts, [&](std::size_t i) {
        json j = judge_file(**fresh, (*items)[i], seed, nullptr, compile_ratios);
        lines << j.dump() << "\n" << std::flush;  // on stdout the later line of a file stands
        return j;
      });
    if (retried > 0) {
      const auto still = std::count_if(verdicts.begin(), verdicts.end(), [](const json& v) {
        return v.value("status", "") == "infra_error";
      });
      err << "kforge eval: " << retried << " candidate(s) out of memory judged again alone; " << still
          << " infra_error now\n";
      if (!opt.out.empty()) {
        // One line per candidate again, replaced whole: a failure leaves the lines as they came.
        std::string text;
        for (const auto& v : verdicts) text += v.dump() + "\n";
        if (auto s = write_text_file_atomically(opt.out, text); !s) {
          err << "kforge eval: " << s.message() << "\n";
          return 2;
        }
      }
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

  json summary = summarize_verdicts(verdicts);
  summary["seconds"] = seconds;
  summary["candidates_per_second"] = seconds > 0 ? items->size() / seconds : 0.0;
  summary["seed"] = seed;
  if (opt.reuse_repeats) summary["reused"] = repeats.take_reused();
  if (opt.retry_infra_alone) summary["retried_alone"] = retried;
  summary["sandbox"] = sandbox_described;
  err << format_summary(summary);
  if (baselines) {
    summary["vs_compile"] = against_compile(verdicts, *baselines, device);
    err << format_against_compile(summary["vs_compile"]);
  }
  char buf[128];
  std::snprintf(buf, sizeof buf, "%.1f s, %.2f candidates/s\n", seconds,
                summary["candidates_per_second"].get<double>());
  err << buf;
  if (!opt.summary.empty()) {
    std::ofstream s(opt.summary, std::ios::trunc);
    s << summary.dump(2) << "\n";
    if (!s) {
      err << "kforge eval: cannot write " << opt.summary << "\n";
      return 2;
    }
  }
  return 0;
}

}  // namespace kforge::sandbox

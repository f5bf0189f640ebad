#include "sandbox/eval_command.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "common/clock.hpp"
#include "common/hash.hpp"
#include "common/parallel.hpp"
#include "common/text_file.hpp"
#include "sandbox/pool.hpp"
#include "sandbox/repeat_verdicts.hpp"
#include "sandbox/verdict_json.hpp"
#include "tasks/builtin.hpp"
#include "tasks/task_parser.hpp"

namespace kforge::sandbox {

namespace fs = std::filesystem;
using json = nlohmann::json;

json summarize_verdicts(const std::vector<json>& verdicts) {
  std::map<std::string, int> counts;
  int correct = 0;
  double log_sum = 0;
  const double ps[] = {0.0, 1.0, 1.5, 2.0};
  int fast[4] = {0, 0, 0, 0};
  for (const auto& v : verdicts) {
    const std::string status = v.value("status", "infra_error");
    ++counts[status];
    if (status != "ok") continue;
    ++correct;
    const double s = v.value("speedup", 0.0);
    if (s > 0) log_sum += std::log(s);
    for (int i = 0; i < 4; ++i)
      if (s > ps[i]) ++fast[i];
  }
  const double n = static_cast<double>(verdicts.size());
  json fast_p = json::object();
  for (int i = 0; i < 4; ++i) {
    char key[32];
    std::snprintf(key, sizeof key, "fast_%g", ps[i]);
    fast_p[key] = n > 0 ? fast[i] / n : 0.0;
  }
  return json{{"candidates", verdicts.size()},
              {"correct", correct},
              {"correctness_rate", n > 0 ? correct / n : 0.0},
              {"fast_p", fast_p},
              {"geomean_speedup", correct > 0 ? std::exp(log_sum / correct) : 0.0},
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
  os << "\nverdicts:";
  for (const auto& [k, v] : s.at("counts").items()) os << " " << k << "=" << v.get<int>();
  os << "\n";
  if (s.contains("reused"))
    os << s["reused"].get<std::uint64_t>() << " of the verdicts reused: repeats of a source judged for its task\n";
  return os.str();
}

std::string default_compile_cache() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/kforge/compile";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/kforge/compile";
  return "/tmp/kforge-compile-cache";
}

int eval_command(const eval_options& opt, std::ostream& out, std::ostream& err) {
  auto loaded = opt.tasks.empty() ? tasks::builtin_tasks() : tasks::load_task_file(opt.tasks);
  if (!loaded) {
    err << "kforge eval: " << loaded.err().message << "\n";
    return 2;
  }
  std::map<std::string, const tasks::task*> by_id;
  for (const auto& t : *loaded) by_id[t.id] = &t;

  // DIR/<task id>/*.cu; task ids hold '/', so walk the tree and match the parent path.
  struct item {
    const tasks::task* task;
    fs::path file;
  };
  std::vector<item> items;
  std::error_code ec;
  if (!fs::is_directory(opt.candidates, ec)) {
    err << "kforge eval: --candidates " << opt.candidates << " is not a directory\n";
    return 2;
  }
  std::vector<std::string> unknown;
  for (auto it = fs::recursive_directory_iterator(opt.candidates, ec);
       it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    if (!it->is_regular_file() || it->path().extension() != ".cu") continue;
    const std::string id = it->path().parent_path().lexically_relative(opt.candidates).generic_string();
    if (auto t = by_id.find(id); t != by_id.end())
      items.push_back({t->second, it->path()});
    else
      unknown.push_back(it->path().string());
  }
  std::sort(items.begin(), items.end(), [](const item& a, const item& b) { return a.file < b.file; });
  if (!unknown.empty()) {
    err << "kforge eval: " << unknown.size() << " file(s) under a folder that names no task, e.g. "
        << unknown.front() << "\n";
    return 2;
  }
  if (items.empty()) {
    err << "kforge eval: no DIR/<task id>/*.cu files under " << opt.candidates << "\n";
    return 2;
  }

  std::uint64_t seed = opt.seed;
  if (seed == 0) seed = (static_cast<std::uint64_t>(std::random_device{}()) << 32) | std::random_device{}();
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
  if (!po.eval.compile.cache_dir.empty()) fs::create_directories(po.eval.compile.cache_dir, ec);
  po.work_dir = po.eval.compile.cache_dir.empty() ? fs::temp_directory_path().string()
                                                   : po.eval.compile.cache_dir;
  auto pool = sandbox_pool::create(po);
  if (!pool) {
    err << "kforge eval: " << pool.err().message << "\n";
    return 2;
  }
  const int jobs = opt.jobs > 0 ? opt.jobs
                                : std::clamp<int>(static_cast<int>(std::thread::hardware_concurrency()), 1, 16);
  err << "kforge eval: " << items.size() << " candidate(s) of " << by_id.size() << " task(s); "
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
  std::vector<json> verdicts(items.size());
  std::mutex write_mutex;
  repeat_verdicts repeats(items.size() + 1);
  const auto started = std::chrono::steady_clock::now();
  parallel_for(items.size(), jobs, [&](std::size_t i) {
    const auto& it = items[i];
    auto source = read_text_file(it.file.string());
    json j;
    if (!source) {
      j = json{{"status", "infra_error"}, {"reason", source.err().message}};
    } else {
      // One seed per task: every candidate of a task is checked on the same inputs, so the
      // reference server computes them once.
      const std::uint64_t parts[2] = {seed, fnv1a64(it.task->id)};
      const auto judge = [&]() -> result<wire::VerdictT> {
        return (*pool)->evaluate(*it.task, *source, fnv1a64(parts, sizeof parts));
      };
      try {
        const auto v = opt.reuse_repeats ? repeats.verdict(it.task->id + "\n" + *source, judge) : judge();
        j = v ? verdict_json(*v) : json{{"status", "infra_error"}, {"reason", v.message()}};
      } catch (const std::exception& e) {
        // A sandbox bug must not end the whole eval and lose the other verdicts.
        j = json{{"status", "infra_error"}, {"reason", std::string("sandbox error: ") + e.what()}};
      }
    }
    j["task"] = it.task->id;
    j["file"] = it.file.string();
    std::lock_guard lock(write_mutex);
    lines << j.dump() << "\n" << std::flush;
    verdicts[i] = std::move(j);
  });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

  json summary = summarize_verdicts(verdicts);
  summary["seconds"] = seconds;
  summary["candidates_per_second"] = seconds > 0 ? items.size() / seconds : 0.0;
  summary["seed"] = seed;
  if (opt.reuse_repeats) summary["reused"] = repeats.take_reused();
  summary["sandbox"] = (*pool)->describe();
  err << format_summary(summary);
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

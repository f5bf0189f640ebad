#include "tasks/tasks_command.hpp"

#include <chrono>
#include <iomanip>
#include <map>
#include <ostream>

#include "tasks/builtin.hpp"
#include "tasks/task_parser.hpp"
#ifdef KFORGE_TASKS_WITH_TORCH
#include <fstream>

#include "common/subprocess.hpp"
#include "tasks/check_server.hpp"
#include "tasks/inputs.hpp"
#include "tasks/reference.hpp"
#include "tasks/synth_run.hpp"
#include "tasks/task_check.hpp"
#endif

namespace kforge::tasks {
namespace {

// The tasks named by the options: the files given, or the built-in library. Parse errors are
// collected (validate reports them as failures; list and show refuse to go on).
struct loaded {
  std::vector<task> tasks;
  std::vector<error> errors;
};

loaded load(const tasks_options& opt) {
  loaded l;
  if (opt.files.empty()) {
    auto b = builtin_tasks();
    if (b)
      l.tasks = std::move(b).value();
    else
      l.errors.push_back(b.err());
    return l;
  }
  task_set_reader reader;
  for (const auto& f : opt.files) reader.add_file(f);
  l.errors = reader.errors();
  l.tasks = reader.take_tasks();
  return l;
}

// "x[4096, 4096], w[4096] bfloat16": the inputs at the chosen shapes (dtype when not float32).
std::string inputs_line(const task& t, shape_choice which = std::nullopt) {
  const auto shapes = input_shapes(t, which);
  std::string s;
  for (std::size_t i = 0; i < t.inputs.size(); ++i) {
    const auto& in = t.inputs[i];
    if (!s.empty()) s += ", ";
    s += in.name + to_string(shapes[i]);
    if (in.type != dtype::float32) s += " " + std::string(to_string(in.type));
  }
  return s;
}

int list(const tasks_options& opt, std::ostream& out, std::ostream& err) {
  if (opt.category && !parse_category(*opt.category)) {
    err << "kforge tasks list: --category: unknown category '" << *opt.category << "' (expected "
        << category_names() << ")\n";
    return 2;
  }
  auto l = load(opt);
  for (const auto& e : l.errors) err << "kforge tasks list: " << e.message << "\n";
  if (!l.errors.empty()) return 2;
  std::map<std::string, int> per_category;
  int shown = 0;
  for (const auto& t : l.tasks) {
    if (opt.category && to_string(t.category) != *opt.category) continue;
    out << std::left << std::setw(36) << t.id << " " << std::setw(14) << to_string(t.category)
        << " " << t.variants.size() << " var  " << inputs_line(t) << "\n";
    ++per_category[std::string(to_string(t.category))];
    ++shown;
  }
  out << shown << " tasks";
  const char* sep = ": ";
  for (const auto& [c, n] : per_category) {
    out << sep << c << " " << n;
    sep = ", ";
  }
  out << "\n";
  return 0;
}

int show(const tasks_options& opt, std::ostream& out, std::ostream& err) {
  auto l = load(opt);
  for (const auto& e : l.errors) err << "kforge tasks show: " << e.message << "\n";
  if (!l.errors.empty()) return 2;
  for (const auto& t : l.tasks)
    if (t.id == opt.id) {
      out << to_json_pretty(t) << "\n";
      return 0;
    }
  err << "kforge tasks show: no task '" << opt.id << "' in "
      << (opt.files.empty() ? std::string("the built-in library") : "the given files") << "\n";
  return 2;
}

#ifdef KFORGE_TASKS_WITH_TORCH
int validate(const tasks_options& opt, std::ostream& out, std::ostream& err) {
  auto dev = device::parse(opt.device);
  if (!dev) {
    err << "kforge tasks validate: --device: " << dev.message() << "\n";
    return 2;
  }
  if (dev->type == device::kind::cuda && !cuda_available()) {
    err << "kforge tasks validate: --device " << opt.device << ": no CUDA device visible\n";
    return 2;
  }
  if (opt.shapes != "smallest" && opt.shapes != "variants" && opt.shapes != "all") {
    err << "kforge tasks validate: --shapes: expected smallest, variants or all\n";
    return 2;
  }
  if (!(opt.time_limit_s > 0)) {
    err << "kforge tasks validate: --time-limit-s must be > 0\n";
    return 2;
  }
  const auto limit = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::duration<double>(opt.time_limit_s));
  check_client checks(opt.check_server.empty()
                          ? std::vector<std::string>{self_executable(), "tasks", "check-server"}
                          : opt.check_server);
  const auto start = std::chrono::steady_clock::now();
  auto l = load(opt);
  int failed = 0, passed = 0;
  for (const auto& e : l.errors) {
    out << "FAIL  " << e.message << "\n";
    ++failed;
  }
  for (const auto& t : l.tasks) {
    std::vector<shape_choice> choices;
    if (opt.shapes == "smallest") {
      choices.push_back(smallest_shapes(t));
    } else {
      if (opt.shapes == "all" || t.variants.empty()) choices.push_back(std::nullopt);
      for (std::size_t v = 0; v < t.variants.size(); ++v) choices.push_back(v);
    }
    std::vector<std::string> problems;
    double ms = 0;
    for (const auto& c : choices) {
      check_options co;
      co.dev = *dev;
      co.shapes = c;
      auto r = checks.check(t, co, limit);
      ms += r.elapsed_ms;
      const std::string at = c ? "variant " + std::to_string(*c) : std::string("primary");
      for (auto& p : r.problems) problems.push_back(choices.size() > 1 ? at + ": " + p : p);
    }
    if (problems.empty()) {
      ++passed;
      const auto which = choices.size() > 1 ? std::to_string(choices.size()) + " shape sets"
                                            : "at " + inputs_line(t, choices.front());
      out << "ok    " << std::left << std::setw(36) << t.id << " " << std::fixed
          << std::setprecision(1) << std::setw(8) << ms << " ms  " << which << "\n";
    } else {
      ++failed;
      out << "FAIL  " << t.id << ": " << problems.front() << "\n";
      for (std::size_t i = 1; i < problems.size(); ++i) out << "      " << problems[i] << "\n";
    }
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out << "validate: " << passed + failed << " tasks on " << dev->str() << ", " << passed << " ok, "
      << failed << " failed (" << std::fixed << std::setprecision(1) << secs << " s)\n";
  return failed ? 1 : 0;
}
#endif

#ifdef KFORGE_TASKS_WITH_TORCH
/// Times every reference eagerly at its primary shapes (or the smallest with --shapes smallest),
/// one JSON line per task: the reference eager time the reward's first baseline starts from.
int baseline(const tasks_options& opt, std::ostream& out, std::ostream& err) {
  auto dev = device::parse(opt.device);
  if (!dev) {
    err << "kforge tasks baseline: --device: " << dev.message() << "\n";
    return 2;
  }
  if (dev->type == device::kind::cuda && !cuda_available()) {
    err << "kforge tasks baseline: --device " << opt.device
        << ": no CUDA device visible (use --device cpu to time on the CPU)\n";
    return 2;
  }
  if (opt.shapes != "primary" && opt.shapes != "smallest") {
    err << "kforge tasks baseline: --shapes: expected primary or smallest\n";
    return 2;
  }
  if (opt.trials < 1) {
    err << "kforge tasks baseline: --trials must be >= 1\n";
    return 2;
  }
  std::ofstream file;
  if (!opt.out.empty()) {
    file.open(opt.out);
    if (!file) {
      err << "kforge tasks baseline: cannot write " << opt.out << "\n";
      return 2;
    }
  }
  const auto start = std::chrono::steady_clock::now();
  auto l = load(opt);
  int failed = static_cast<int>(l.errors.size());
  for (const auto& e : l.errors) err << "FAIL  " << e.message << "\n";
  int timed = 0;
  for (const auto& t : l.tasks) {
    const shape_choice which = opt.shapes == "smallest" ? smallest_shapes(t) : std::nullopt;
    auto ref = reference::compile(t);
    auto in = ref ? make_inputs(t, 1, which, *dev) : result<tensor_list>(ref.err());
    auto tm = in ? ref->time(*in, 3, opt.trials) : result<timing>(in.err());
    if (!tm) {
      ++failed;
      err << "FAIL  " << t.id << ": " << tm.message() << "\n";
      continue;
    }
    ++timed;
    out << std::left << std::setw(40) << t.id << " " << std::setw(14) << to_string(t.category)
        << std::right << std::fixed << std::setprecision(3) << std::setw(10) << tm->median_ms
        << " ms  (IQR " << tm->p25_ms << "-" << tm->p75_ms << ")\n";
    if (file)
      file << "{\"id\": \"" << t.id << "\", \"category\": \"" << to_string(t.category)
           << "\", \"device\": \"" << dev->str() << "\", \"shapes\": \"" << opt.shapes
           << "\", \"median_ms\": " << tm->median_ms << ", \"p25_ms\": " << tm->p25_ms
           << ", \"p75_ms\": " << tm->p75_ms << ", \"trials\": " << tm->trials << "}\n";
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out << "baseline: " << timed << " references timed on " << dev->str() << ", " << failed
      << " failed (" << std::fixed << std::setprecision(1) << secs << " s)"
      << (opt.out.empty() ? "" : "; written to " + opt.out) << "\n";
  return failed ? 1 : 0;
}
#endif

#ifdef KFORGE_TASKS_WITH_TORCH
/// Synthesizes tasks (tasks/synth_run.hpp) into --out and prints the rejection table.
int synthesize(const tasks_options& opt, std::ostream& out, std::ostream& err) {
  if (opt.out.empty()) {
    err << "kforge tasks synth: --out FILE is required (the kept tasks, as JSON Lines)\n";
    return 2;
  }
  synth::synth_options so;
  if (opt.device == "auto") {
    so.dev = cuda_available() ? device::cuda(0) : device::cpu();
  } else {
    auto dev = device::parse(opt.device);
    if (!dev) {
      err << "kforge tasks synth: --device: " << dev.message() << "\n";
      return 2;
    }
    if (dev->type == device::kind::cuda && !cuda_available()) {
      err << "kforge tasks synth: --device " << opt.device
          << ": no CUDA device visible (use --device cpu to synthesize on the CPU)\n";
      return 2;
    }
    so.dev = *dev;
  }
  so.count = opt.count;
  so.seed = opt.seed;
  so.max_ops = opt.max_ops;
  so.max_tries = opt.max_tries;
  so.min_ms = opt.min_ms;
  so.max_ms = opt.max_ms;
  so.trials = opt.trials;
  so.exclude = opt.exclude;
  so.max_seconds = opt.max_seconds;
  so.verbose = opt.verbose;
  std::ofstream file(opt.out);
  if (!file) {
    err << "kforge tasks synth: cannot write " << opt.out << "\n";
    return 2;
  }
  auto rep = synth::synthesize(so, file, err);
  if (!rep) {
    err << "kforge tasks synth: " << rep.message() << "\n";
    return 2;
  }
  out << synth::format_report(*rep, so);
  out << "written to " << opt.out << "\n";
  if (rep->kept < so.count) {
    err << "kforge tasks synth: kept " << rep->kept << " of the " << so.count << " asked for ("
        << (rep->out_of_time ? "time limit" : "--max-tries") << " reached after " << rep->tried
        << " tries)\n";
    return 1;
  }
  return 0;
}
#endif

}  // namespace

int tasks_command(const tasks_options& opt, std::ostream& out, std::ostream& err) {
  if (opt.action == "list") return list(opt, out, err);
  if (opt.action == "show") return show(opt, out, err);
  if (opt.action == "check-server") {
#ifdef KFORGE_TASKS_WITH_TORCH
    return serve_task_checks();
#else
    err << "kforge tasks check-server: not available in this build\n";
    return 3;
#endif
  }
  if (opt.action == "validate") {
#ifdef KFORGE_TASKS_WITH_TORCH
    return validate(opt, out, err);
#else
    err << "kforge tasks validate: not available in this build (it runs references with "
           "LibTorch; configure with -DKFORGE_WITH_TORCH=ON)\n";
    return 3;
#endif
  }
  if (opt.action == "synth") {
#ifdef KFORGE_TASKS_WITH_TORCH
    return synthesize(opt, out, err);
#else
    err << "kforge tasks synth: not available in this build (it runs references with "
           "LibTorch; configure with -DKFORGE_WITH_TORCH=ON)\n";
    return 3;
#endif
  }
  if (opt.action == "baseline" && opt.against == "compile") {
    // Python does the timing: this needs no LibTorch in kforge.
    auto o = opt.compile;
    o.files = opt.files;
    o.out = opt.out;
    o.device = opt.device;
    o.shapes = opt.shapes;
    o.trials = opt.trials;
    return measure_compile_baselines(o, out, err);
  }
  if (opt.action == "baseline" && opt.against != "eager") {
    err << "kforge tasks baseline: --against " << opt.against << ": expected eager or compile\n";
    return 2;
  }
  if (opt.action == "baseline" && (opt.compile.eager_only || opt.compile.mode != "default")) {
    err << "kforge tasks baseline: --mode and --eager-only go with --against compile\n";
    return 2;
  }
  if (opt.action == "baseline") {
#ifdef KFORGE_TASKS_WITH_TORCH
    return baseline(opt, out, err);
#else
    err << "kforge tasks baseline: not available in this build (it runs references with "
           "LibTorch; configure with -DKFORGE_WITH_TORCH=ON)\n";
    return 3;
#endif
  }
  if (opt.action == "import-kernelbench") return import_kernelbench(opt.kernelbench, out, err);
  err << "kforge tasks: unknown action '" << opt.action
      << "' (expected list, show, validate, synth, baseline or import-kernelbench)\n";
  return 2;
}

}  // namespace kforge::tasks

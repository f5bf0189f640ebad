#include "tasks/compile_baseline.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <ostream>

#include "common/subprocess.hpp"
#include "tasks/builtin.hpp"
#include "tasks/kernelbench_import.hpp"
#include "tasks/task_parser.hpp"

namespace kforge::tasks {

namespace fs = std::filesystem;

const std::vector<std::string>& compile_modes() {
  static const std::vector<std::string> modes{"default", "reduce-overhead", "max-autotune",
                                              "max-autotune-no-cudagraphs"};
  return modes;
}

int measure_compile_baselines(const compile_baseline_options& o, std::ostream& out, std::ostream& err) {
  const auto fail = [&](const std::string& why, int code) {
    err << "kforge tasks baseline --against compile: " << why << "\n";
    return code;
  };
  if (o.out.empty()) return fail("--out FILE is required (the measurements, as JSON Lines)", 2);
  const auto& modes = compile_modes();
  if (std::find(modes.begin(), modes.end(), o.mode) == modes.end())
    return fail("--mode " + o.mode + ": expected default, reduce-overhead, max-autotune or "
                "max-autotune-no-cudagraphs", 2);
  if (o.shapes != "primary" && o.shapes != "smallest")
    return fail("--shapes " + o.shapes + ": expected primary or smallest", 2);
  if (o.trials < 1) return fail("--trials must be >= 1", 2);
  const bool cuda = o.device == "cuda" || o.device.rfind("cuda:", 0) == 0;
  if (!cuda && o.device != "cpu") return fail("--device " + o.device + ": expected cuda, cuda:N or cpu", 2);

  // Every task is parsed here first, so a bad file is refused before Python starts, and the
  // script reads one file with every task kforge would run (defaults written out).
  std::vector<task> tasks;
  if (o.files.empty()) {
    auto b = builtin_tasks();
    if (!b) return fail(b.message(), 1);
    tasks = std::move(b).value();
  } else {
    task_set_reader reader;
    for (const auto& f : o.files) reader.add_file(f);
    if (!reader.errors().empty()) {
      for (const auto& e : reader.errors()) err << e.message << "\n";
      return fail(std::to_string(reader.errors().size()) + " error(s) in the task file(s)", 2);
    }
    tasks = reader.take_tasks();
  }
  if (tasks.empty()) return fail("no tasks in the task file(s)", 2);

  const std::string script = KFORGE_COMPILE_BASELINE_SCRIPT;
  if (!fs::exists(script)) return fail("the script " + script + " is missing", 1);
  auto py = python_with_torch();
  if (!py) return fail(py.message(), 2);

  const fs::path list = fs::temp_directory_path() / ("kforge-baseline-tasks-" + std::to_string(::getpid()) + ".jsonl");
  {
    std::ofstream f(list);
    for (const auto& t : tasks) f << to_json_line(t) << "\n";
    if (!f) return fail("cannot write " + list.string(), 1);
  }
  std::vector<std::string> argv{*py, script, list.string(), "--out", o.out, "--device", o.device,
                                "--mode", o.mode, "--shapes", o.shapes, "--trials", std::to_string(o.trials)};
  if (o.eager_only) argv.push_back("--eager-only");
  // Inductor's compile of a large task file takes hours; each task has the script's own limit.
  auto r = run_process(argv, std::chrono::hours(24), 16 << 20);
  std::error_code ec;
  fs::remove(list, ec);
  if (!r) return fail(r.message(), 1);
  out << r->output;
  switch (r->exit_code) {
    case 0: return 0;
    case 1: return fail("some tasks were not measured; their lines in " + o.out + " say why", 1);
    case 2: return fail("refused (see above)", 2);
    case 3: return fail("this Python's torch has no torch.compile (" + *py +
                        "); run it where torch >= 2.0 is, or set KFORGE_PYTHON", 3);
    default: return fail("the script failed (exit " + std::to_string(r->exit_code) + ")", 1);
  }
}

}  // namespace kforge::tasks

#include "tasks/kernelbench_import.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <ostream>
#include <thread>

#include "common/subprocess.hpp"
#include "tasks/task_parser.hpp"

namespace kforge::tasks {

namespace fs = std::filesystem;

result<std::string> python_with_torch() {
  std::vector<std::string> tried;
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("KFORGE_PYTHON"); env && *env) candidates.emplace_back(env);
  candidates.emplace_back("python3");
  candidates.emplace_back("/usr/bin/python3");
  for (const auto& py : candidates) {
    auto r = run_process({py, "-c", "import torch"}, std::chrono::seconds(120));
    if (r && r->exit_code == 0) return py;
    tried.push_back(py + (r ? " (no torch module)" : " (not found)"));
  }
  std::string list;
  for (const auto& t : tried) list += (list.empty() ? "" : ", ") + t;
  return error{"no Python with torch: tried " + list +
               "; install python3-torch (deploy/setup.sh does) or set KFORGE_PYTHON"};
}

int import_kernelbench(const kernelbench_import_options& o, std::ostream& out, std::ostream& err) {
  const auto fail = [&](const std::string& why, int code) {
    err << "kforge tasks import-kernelbench: " << why << "\n";
    return code;
  };
  if (o.paths.empty()) return fail("name the problem files or folders", 2);
  if (o.out.empty()) return fail("--out is required", 2);
  if (o.scale < 1) return fail("--scale must be >= 1", 2);
  for (const auto& p : o.paths)
    if (!fs::exists(p)) return fail(p + ": no such file or folder", 2);
  const std::string script = KFORGE_KERNELBENCH_IMPORTER;
  if (!fs::exists(script)) return fail("the importer " + script + " is missing", 1);
  auto py = python_with_torch();
  if (!py) return fail(py.message(), 2);
  std::vector<std::string> argv{*py, script};
  argv.insert(argv.end(), o.paths.begin(), o.paths.end());
  // Conversion is CPU work in Python, one problem after another: a core each (a level took minutes).
  const int jobs = o.jobs > 0 ? o.jobs : static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
  for (const auto& a : {std::string("--out"), o.out, std::string("--scale"), std::to_string(o.scale),
                        std::string("--cpu-budget"), std::to_string(o.cpu_budget_gib), std::string("--jobs"),
                        std::to_string(jobs)})
    argv.push_back(a);
  if (!o.failures.empty()) {
    argv.push_back("--failures");
    argv.push_back(o.failures);
  }
  auto r = run_process(argv, std::chrono::hours(4), 16 << 20);
  if (!r) return fail(r.message(), 1);
  out << r->output;
  if (r->exit_code != 0) return fail("the importer failed (exit " + std::to_string(r->exit_code) + ")", 1);
  // Every task it wrote must be one kforge reads.
  std::error_code ec;
  if (fs::file_size(o.out, ec) == 0 || ec) {
    out << "kforge tasks import-kernelbench: no task imported\n";
    return 0;
  }
  auto tasks = load_task_file(o.out);
  if (!tasks) return fail("the importer wrote a task kforge cannot read: " + tasks.message(), 1);
  out << "kforge tasks import-kernelbench: " << tasks->size() << " task(s) in " << o.out
      << " parse; check their references with `kforge tasks validate " << o.out << "`\n";
  return 0;
}

}  // namespace kforge::tasks

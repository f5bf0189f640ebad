// On a GPU: every built-in reference at its primary shapes (declared output shapes, determinism
// and the degenerate-task checks at full size), every variant, agreement with the CPU within the
// task's tolerance on identical inputs, and the eager time of each reference, printed as a table
// (the seed of `kforge tasks baseline`). KFORGE_TASKS_TIMES=FILE also writes the times as JSON
// lines. Exits 77 (skipped) without a CUDA device.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "tasks/builtin.hpp"
#include "tasks/inputs.hpp"
#include "tasks/reference.hpp"
#include "tasks/task_check.hpp"

using namespace kforge::tasks;

namespace {

// Sized so the eager reference is well above launch overhead on an H200.
constexpr double min_eager_ms = 0.1;

std::string problems_of(const check_report& r) {
  std::string s;
  for (const auto& p : r.problems) s += "\n  " + p;
  return s;
}

}  // namespace

TEST_CASE("every built-in reference on the GPU: all shapes checked, CPU agreement, eager time") {
  if (!cuda_available()) {
    std::printf(
        "SKIP: no CUDA device visible (GPU tests run on the GPU host: deploy/gpu-host.sh)\n");
    std::exit(77);
  }
  auto tasks = builtin_tasks();
  REQUIRE(tasks.ok());
  const auto gpu = device::cuda(0);
  const auto start = std::chrono::steady_clock::now();
  struct row {
    std::string id, category;
    timing t;
  };
  std::vector<row> rows;
  std::printf("%-40s %-14s %10s %10s %10s\n", "task", "category", "median_ms", "p25_ms",
              "p75_ms");
  for (const auto& t : *tasks) {
    INFO(t.id);
    check_options o;
    o.dev = gpu;
    o.shapes = std::nullopt;  // primary: run() also checks the declared output shapes
    auto r = check_task_runs(t, o);
    CHECK_MESSAGE(r.ok(), t.id << " (primary shapes)" << problems_of(r));
    for (std::size_t v = 0; v < t.variants.size(); ++v) {
      o.shapes = v;
      r = check_task_runs(t, o);
      CHECK_MESSAGE(r.ok(), t.id << " (variant " << v << ")" << problems_of(r));
    }

    auto ref = reference::compile(t);
    REQUIRE(ref.ok());
    // The CPU and the GPU run different kernels (as a candidate would): on the same inputs they
    // must agree within the task's tolerance, or the tolerance is too tight to be fair.
    for (std::size_t v = 0; v < t.variants.size(); ++v) {
      auto cpu_in = make_inputs(t, 11, v, device::cpu());
      REQUIRE(cpu_in.ok());
      auto gpu_in = copy_to(*cpu_in, gpu);
      REQUIRE(gpu_in.ok());
      auto cpu_out = ref->run(*cpu_in);
      auto gpu_out = ref->run(*gpu_in);
      REQUIRE(cpu_out.ok());
      REQUIRE(gpu_out.ok());
      auto c = compare(*cpu_out, *gpu_out, t.tolerance);
      REQUIRE(c.ok());
      CHECK_MESSAGE(c->close, t.id << " variant " << v << ": CPU and GPU differ beyond the "
                                   << "tolerance: max abs " << c->max_abs_error << ", max rel "
                                   << c->max_rel_error << ", " << c->bad_count << " elements");
    }

    auto in = make_inputs(t, 1, std::nullopt, gpu);
    REQUIRE(in.ok());
    auto tm = ref->time(*in, 3, 30);
    REQUIRE_MESSAGE(tm.ok(), (tm.ok() ? "" : tm.message()));
    CHECK_MESSAGE(tm->median_ms >= min_eager_ms,
                  t.id << ": eager median " << tm->median_ms << " ms at the primary shapes");
    rows.push_back({t.id, std::string(to_string(t.category)), *tm});
    // One line per task as it finishes, so a run cut short still shows what it measured.
    std::printf("%-40s %-14s %10.3f %10.3f %10.3f\n", t.id.c_str(), rows.back().category.c_str(),
                tm->median_ms, tm->p25_ms, tm->p75_ms);
    std::fflush(stdout);
  }
  const auto below = std::count_if(rows.begin(), rows.end(),
                                   [](const row& r) { return r.t.median_ms < min_eager_ms; });
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("built-in references on %s: %zu timed, %ld below %.1f ms, %.1f s in all\n",
              gpu.str().c_str(), rows.size(), static_cast<long>(below), min_eager_ms, secs);

  if (const char* path = std::getenv("KFORGE_TASKS_TIMES")) {
    std::ofstream f(path);
    for (const auto& r : rows)
      f << "{\"id\": \"" << r.id << "\", \"category\": \"" << r.category
        << "\", \"median_ms\": " << r.t.median_ms << ", \"p25_ms\": " << r.t.p25_ms
        << ", \"p75_ms\": " << r.t.p75_ms << ", \"trials\": " << r.t.trials << "}\n";
  }
}

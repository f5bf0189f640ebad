// On a GPU: synthesis with its full filters (primary shapes checked and timed), then for each kept
// task the eager time against the cost model's estimate (printed, to calibrate it) and agreement
// of the GPU and CPU references within the task's tolerance at the medium variant (a correct
// kernel that sums in another order must pass). Exits 77 (skipped) without a CUDA device.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

#include "tasks/inputs.hpp"
#include "tasks/reference.hpp"
#include "tasks/synth_run.hpp"
#include "tasks/task_parser.hpp"

using namespace kforge::tasks;
namespace synth = kforge::tasks::synth;

TEST_CASE("synthesis on the GPU: kept tasks are timed in the window and agree with the CPU") {
  if (!cuda_available()) {
    std::printf(
        "SKIP: no CUDA device visible (GPU tests run on the GPU host: deploy/gpu-host.sh)\n");
    std::exit(77);
  }
  const auto gpu = device::cuda(0);
  synth::synth_options o;
  o.count = 30;
  o.seed = 1;
  o.dev = gpu;
  std::ostringstream jsonl, log;
  auto rep = synth::synthesize(o, jsonl, log);
  REQUIRE_MESSAGE(rep.ok(), (rep.ok() ? "" : rep.message()));
  std::printf("%s", synth::format_report(*rep, o).c_str());
  CHECK(rep->kept == o.count);

  task_set_reader reader;
  reader.add_lines(jsonl.str(), "synth-gpu");
  REQUIRE(reader.errors().empty());
  synth::generate_options gen;
  gen.max_ops = o.max_ops;
  gen.min_ms = o.min_ms;
  gen.max_ms = o.max_ms;
  std::vector<double> ratios;
  std::printf("%-20s %10s %10s  %s\n", "task", "est_ms", "eager_ms", "signature");
  for (const auto& t : reader.tasks()) {
    INFO(t.id << "\n" << t.reference);
    // The provenance's seed regenerates the program, and with it the estimate.
    const auto seed_text = t.provenance.substr(6, t.provenance.find(':', 6) - 6);
    const auto p = synth::generate(std::stoull(seed_text), gen);
    REQUIRE(p.signature() == *synth::provenance_signature(t));

    auto ref = reference::compile(t);
    REQUIRE(ref.ok());
    auto in = make_inputs(t, 1, std::nullopt, gpu);
    REQUIRE(in.ok());
    auto tm = ref->time(*in, 2, 10);
    REQUIRE(tm.ok());
    CHECK(tm->median_ms >= o.min_ms / 2);  // kept inside the window, allowing for jitter
    CHECK(tm->median_ms <= o.max_ms * 2);
    ratios.push_back(tm->median_ms / p.estimate_ms());
    std::printf("%-20s %10.3f %10.3f  %s\n", t.id.c_str(), p.estimate_ms(), tm->median_ms,
                p.signature().c_str());

    auto cpu_in = make_inputs(t, 1, shape_choice{0}, device::cpu());
    REQUIRE(cpu_in.ok());
    auto gpu_in = copy_to(*cpu_in, gpu);
    REQUIRE(gpu_in.ok());
    auto cpu_out = ref->run(*cpu_in);
    auto gpu_out = ref->run(*gpu_in);
    REQUIRE(cpu_out.ok());
    REQUIRE(gpu_out.ok());
    auto c = compare(*cpu_out, *gpu_out, t.tolerance);
    REQUIRE(c.ok());
    CHECK_MESSAGE(c->close, "GPU and CPU differ beyond the tolerance: max abs "
                                << c->max_abs_error << ", max rel " << c->max_rel_error);
  }
  std::sort(ratios.begin(), ratios.end());
  if (!ratios.empty())
    std::printf("eager / estimated time over %zu tasks: min %.2f, median %.2f, max %.2f\n",
                ratios.size(), ratios.front(), ratios[ratios.size() / 2], ratios.back());
}

#include "tasks/task_check.hpp"

#include <chrono>
#include <optional>

#include "tasks/inputs.hpp"
#include "tasks/reference.hpp"

namespace kforge::tasks {
namespace {

// More than this share of an output's nonzero elements below atol means atol is loose for the
// output's scale (softmax over 8192 entries with atol 1e-4, say). Activations such as ReLU
// have exact zeros, which do not count.
constexpr double max_tiny_fraction = 0.1;
// How far two runs on the same inputs may differ, as a share of the tolerance.
constexpr double jitter_share = 0.01;

// Runs `ref` on `inputs`; on failure records the problem and returns nothing.
std::optional<tensor_list> run(const reference& ref, const tensor_list& inputs,
                               check_report& report) {
  auto out = ref.run(inputs);
  if (!out) {
    report.problems.push_back(out.message());
    return std::nullopt;
  }
  return std::move(out).value();
}

// Outputs a kernel could match without computing anything: NaN/Inf, constant, all within atol
// of zero, or mostly below a loose atol.
void check_output_values(const task& t, check_report& report) {
  auto problem = [&](std::string s) { report.problems.push_back(std::move(s)); };
  for (std::size_t j = 0; j < t.outputs.size(); ++j) {
    const auto& o = t.outputs[j];
    const auto& s = report.outputs[j];
    if (!s.all_finite) problem("output '" + o.name + "' has NaN or Inf");
    if (s.numel > 1 && s.constant) problem("output '" + o.name + "' is constant (every element equal)");
    if (is_floating(o.type) && s.max_abs <= t.tolerance.atol)
      problem("output '" + o.name + "' is within atol of zero everywhere (a kernel writing " +
              "zeros would pass)");
    else if (is_floating(o.type) && s.tiny_fraction > max_tiny_fraction)
      problem("atol " + std::to_string(t.tolerance.atol) + " is loose for output '" + o.name +
              "': " + std::to_string(static_cast<int>(100 * s.tiny_fraction)) +
              "% of its nonzero elements are smaller, so a kernel may get them all wrong");
  }
}

// Each random input redrawn alone must move some output beyond the tolerance, and each output
// must move for some input: otherwise a kernel ignoring that input (or that output's inputs)
// would pass.
void check_input_sensitivity(const task& t, const check_options& opt, const reference& ref,
                             const tensor_list& inputs, const tensor_list& base, check_report& report) {
  auto problem = [&](std::string s) { report.problems.push_back(std::move(s)); };
  std::vector<bool> output_moved(t.outputs.size(), false);
  bool any_random = false;
  for (std::size_t i = 0; i < t.inputs.size(); ++i) {
    if (t.inputs[i].init.dist == distribution::constant) continue;
    any_random = true;
    auto redrawn = make_input(t, i, opt.seed + 1, opt.shapes, opt.dev);
    if (!redrawn) {
      problem(redrawn.message());
      continue;
    }
    tensor_list changed = inputs;
    changed.replace(i, *redrawn, 0);
    auto out = run(ref, changed, report);
    if (!out) continue;
    bool moved = false;
    for (std::size_t j = 0; j < t.outputs.size(); ++j) {
      auto c = compare(base.pick(j), out->pick(j), t.tolerance);
      if (!c) {
        problem(c.message());
        continue;
      }
      if (!c->close) {
        moved = true;
        output_moved[j] = true;
      }
    }
    if (!moved)
      problem("no output changes beyond the tolerance when input '" + t.inputs[i].name +
              "' is redrawn (the reference ignores it, or the shapes hide it)");
  }
  if (any_random)
    for (std::size_t j = 0; j < t.outputs.size(); ++j)
      if (!output_moved[j])
        problem("output '" + t.outputs[j].name + "' does not change when any input changes");
  if (!any_random) problem("every input is a constant: the outputs cannot depend on random inputs");
}

}  // namespace

check_report check_task_runs(const task& t, const check_options& opt) {
  const auto start = std::chrono::steady_clock::now();
  check_report report;
  report.task_id = t.id;
  auto finish = [&]() -> check_report {
    report.elapsed_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count();
    return report;
  };
  auto problem = [&](std::string s) { report.problems.push_back(std::move(s)); };

  auto ref = reference::compile(t);
  if (!ref) {
    problem(ref.message());
    return finish();
  }
  auto inputs = make_inputs(t, opt.seed, opt.shapes, opt.dev);
  if (!inputs) {
    problem(inputs.message());
    return finish();
  }
  // A copy to compare with after the run, on the device (hashing would mean copying every byte
  // to the host, slow at the primary shapes).
  auto pristine = copy_to(*inputs, opt.dev);
  if (!pristine) {
    problem(pristine.message());
    return finish();
  }
  auto base = run(*ref, *inputs, report);
  if (!base) return finish();

  for (std::size_t i = 0; i < t.inputs.size(); ++i) {
    auto c = compare(pristine->pick(i), inputs->pick(i), tolerance{0.0, 0.0});
    if (!c || !c->close) problem("the reference modifies its input '" + t.inputs[i].name + "'");
  }

  auto outs = summarize(*base, /*content_hash=*/false, t.tolerance.atol);
  if (!outs) {
    problem(outs.message());
    return finish();
  }
  report.outputs = *outs;
  check_output_values(t, report);

  // Two runs on the same inputs must agree far inside the tolerance. Not bit for bit: cuDNN's
  // transposed convolutions add with atomics on the GPU, and jitter at 1% of the tolerance
  // cannot change a verdict. On the CPU the runs agree exactly.
  if (auto again = run(*ref, *inputs, report)) {
    auto c = compare(*base, *again,
                     tolerance{t.tolerance.atol * jitter_share, t.tolerance.rtol * jitter_share});
    if (!c)
      problem(c.message());
    else if (!c->close)
      problem("two runs on the same inputs differ (max abs difference " +
              std::to_string(c->max_abs_error) + "): the reference is not deterministic");
  }

  check_input_sensitivity(t, opt, *ref, *inputs, *base, report);
  return finish();
}

}  // namespace kforge::tasks

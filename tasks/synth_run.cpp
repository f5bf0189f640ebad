// Torch-free: runs references only through tasks/reference.hpp, tasks/task_check.hpp and
// tasks/inputs.hpp (built only with LibTorch, as they are).
#include "tasks/synth_run.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ostream>

#include "tasks/inputs.hpp"
#include "tasks/reference.hpp"
#include "tasks/task_check.hpp"
#include "tasks/task_parser.hpp"

namespace kforge::tasks::synth {

using tasks::to_string;
namespace {

bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

std::string shapes_text(const std::vector<shape>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + to_string(x);
  return s;
}

std::string where(shape_choice c) {
  return c ? "variant " + std::to_string(*c) : std::string("primary shapes");
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

}  // namespace

reject_reason classify_problem(const std::string& p) {
  // The wording of check_task_runs (task_check.cpp) and reference::run (reference.cpp); the
  // tests of synthesis reject a crafted task per reason, so a change of wording shows there.
  if (has(p, "at the primary input shapes, the task declares"))
    return reject_reason::shape_mismatch;
  if (has(p, "has NaN or Inf")) return reject_reason::nan_inf;
  if (has(p, "not deterministic")) return reject_reason::nondeterministic;
  if (has(p, "is constant (every element equal)")) return reject_reason::constant;
  if (has(p, "within atol of zero everywhere") || has(p, "is loose for output"))
    return reject_reason::near_zero;
  if (has(p, "no output changes beyond the tolerance") ||
      has(p, "does not change when any input changes") || has(p, "every input is a constant"))
    return reject_reason::input_independent;
  if (has(p, "modifies its input")) return reject_reason::modifies_input;
  return reject_reason::does_not_run;
}

reject_reason worst(const std::vector<reject_reason>& reasons) {
  static const reject_reason order[] = {
      reject_reason::does_not_run,     reject_reason::shape_mismatch, reject_reason::modifies_input,
      reject_reason::nan_inf,          reject_reason::nondeterministic, reject_reason::constant,
      reject_reason::near_zero,        reject_reason::input_independent};
  for (auto r : order)
    if (std::find(reasons.begin(), reasons.end(), r) != reasons.end()) return r;
  return reasons.empty() ? reject_reason::does_not_run : reasons.front();
}

screen_result screen(const task& t, const screen_options& o) {
  screen_result res;
  auto reject = [&](reject_reason r, std::string detail) {
    res.reason = r;
    res.detail = std::move(detail);
    return res;
  };
  auto ref = reference::compile(t);
  if (!ref) return reject(reject_reason::does_not_run, ref.message());

  // Shapes at the primary sizes without running them (the CPU never runs those).
  if (auto meta = ref->output_shapes(input_shapes(t, std::nullopt))) {
    std::vector<shape> declared;
    for (const auto& out : t.outputs) declared.push_back(out.shape);
    if (*meta != declared)
      return reject(reject_reason::shape_mismatch, "outputs on meta tensors are " +
                                                       shapes_text(*meta) + ", declared " +
                                                       shapes_text(declared));
  }

  for (std::size_t k = 0; k < o.shapes.size(); ++k) {
    check_options co;
    co.dev = o.dev;
    co.shapes = o.shapes[k];
    co.seed = o.seed;
    const auto report = check_task_runs(t, co);
    if (!report.ok()) {
      std::vector<reject_reason> reasons;
      for (const auto& p : report.problems) reasons.push_back(classify_problem(p));
      const auto r = worst(reasons);
      const auto first = std::find(reasons.begin(), reasons.end(), r) - reasons.begin();
      return reject(r,
                    where(o.shapes[k]) + ": " + report.problems[static_cast<std::size_t>(first)]);
    }
    if (k < o.expected.size()) {
      std::vector<shape> got;
      for (const auto& s : report.outputs) got.push_back(s.dims);
      if (got != o.expected[k])
        return reject(reject_reason::shape_mismatch, where(o.shapes[k]) + ": outputs are " +
                                                         shapes_text(got) + ", the rules say " +
                                                         shapes_text(o.expected[k]));
    }
  }

  if (o.time) {
    auto inputs = make_inputs(t, o.seed, std::nullopt, o.dev);
    if (!inputs) return reject(reject_reason::does_not_run, inputs.message());
    auto tm = ref->time(*inputs, o.warmup, o.trials);
    if (!tm) return reject(reject_reason::does_not_run, tm.message());
    res.median_ms = tm->median_ms;
    if (tm->median_ms < o.min_ms || tm->median_ms > o.max_ms)
      return reject(reject_reason::runtime, "median " + fixed(tm->median_ms, 3) +
                                                " ms outside [" + fixed(o.min_ms, 3) + ", " +
                                                fixed(o.max_ms, 3) + "] ms");
  }
  return res;
}

result<synth_report> synthesize(const synth_options& opt, std::ostream& jsonl, std::ostream& log) {
  if (opt.count < 1) return error{"--count must be at least 1"};
  if (opt.max_ops < 1 || opt.max_ops > 5) return error{"--max-ops must lie in [1, 5]"};
  if (opt.max_tries < 0) return error{"--max-tries must be >= 0"};
  if (!(opt.min_ms > 0) || !(opt.max_ms > opt.min_ms))
    return error{"the time window needs 0 < --min-ms < --max-ms"};
  if (opt.trials < 1) return error{"--trials must be >= 1"};

  if (opt.max_seconds < 0) return error{"--max-seconds must be >= 0"};
  exclusion_list exclude;
  for (const auto& f : opt.exclude)
    if (auto st = exclude.add_file(f); !st) return error{"--exclude " + f + ": " + st.message()};
  synth_report rep;
  rep.dev = opt.dev;
  rep.excluded_tasks = exclude.size();
  const bool gpu = opt.dev.type == device::kind::cuda;
  static_filter filter(std::move(exclude), opt.min_ms, opt.max_ms, gpu ? 4.0 : 1.0);

  generate_options gen;
  gen.max_ops = opt.max_ops;
  gen.min_ms = opt.min_ms;
  gen.max_ms = opt.max_ms;
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  const long long max_tries = opt.max_tries > 0 ? opt.max_tries : 50LL * opt.count;
  for (long long i = 0; i < max_tries && rep.kept < opt.count; ++i) {
    if (opt.max_seconds > 0 && elapsed() > opt.max_seconds) {
      rep.out_of_time = true;
      break;
    }
    const auto p = generate(mix(opt.seed, static_cast<std::uint64_t>(i)), gen);
    auto t = render(p);
    ++rep.tried;
    std::string why;
    auto reason = filter.admit(p, t, &why);
    double ms = -1.0;
    if (!reason) {
      screen_options so;
      so.dev = opt.dev;
      so.trials = opt.trials;
      so.min_ms = opt.min_ms;
      so.max_ms = opt.max_ms;
      if (gpu) {
        so.shapes = {std::nullopt, 0, 1};
        so.expected = {{p.output_shape(primary)}, {p.output_shape(medium)},
                       {p.output_shape(small)}};
        so.time = true;
      } else {
        so.shapes = {0, 1};
        so.expected = {{p.output_shape(medium)}, {p.output_shape(small)}};
      }
      auto sr = screen(t, so);
      reason = sr.reason;
      why = sr.detail;
      ms = sr.median_ms;
    }
    std::string line;
    if (!reason) {
      // What is written must load back: the same parser and rules as every task file.
      line = to_json_line(t);
      auto back = parse_task(line, "synthesized task");
      if (!back) {
        reason = reject_reason::does_not_run;
        why = "does not parse back: " + back.message();
      }
    }
    if (reason) {
      ++rep.rejected[static_cast<std::size_t>(*reason)];
    } else {
      ++rep.kept;
      jsonl << line << '\n' << std::flush;
    }
    if (opt.verbose) {
      log << (reason ? "reject " : "keep   ") << t.id << "  " << p.signature() << "  est "
          << fixed(p.estimate_ms(), 3) << " ms";
      if (ms >= 0) log << ", measured " << fixed(ms, 3) << " ms";
      if (reason) log << "  [" << to_string(*reason) << "] " << why;
      log << '\n';
    } else if (rep.tried % 100 == 0) {
      log << "synth: " << rep.kept << " kept of " << rep.tried << " tried (" << fixed(elapsed(), 1)
          << " s)\n";
    }
  }
  rep.seconds = elapsed();
  return rep;
}

std::string format_report(const synth_report& r, const synth_options& opt) {
  std::string s;
  auto row = [&](const std::string& label, int n) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "  %-40s %7d\n", label.c_str(), n);
    s += buf;
  };
  s += "synth: " + std::to_string(r.kept) + " kept of " + std::to_string(r.tried) + " tried on " +
       r.dev.str() + " in " + fixed(r.seconds, 1) + " s (seed " + std::to_string(opt.seed) +
       ", up to " + std::to_string(opt.max_ops) + " ops";
  if (!opt.exclude.empty()) {
    std::string files;
    for (const auto& f : opt.exclude) files += (files.empty() ? "" : " ") + f;
    s += ", excluding " + std::to_string(r.excluded_tasks) + " tasks of " + files;
  }
  s += ")\n";
  if (r.out_of_time) s += "  stopped at the time limit (--max-seconds)\n";
  if (r.timed())
    s += "  checked at the primary shapes and both variants; eager time measured (median of " +
         std::to_string(opt.trials) + "), window [" + fixed(opt.min_ms, 3) + ", " +
         fixed(opt.max_ms, 3) + "] ms\n";
  else
    s += "  CPU: checked at the reduced (variant) shapes only, primary shapes on meta tensors; "
         "runtime NOT measured: the estimated H200 eager time must lie in [" +
         fixed(opt.min_ms, 3) + ", " + fixed(opt.max_ms, 3) + "] ms (size bound)\n";
  s += "  rejected:\n";
  for (std::size_t i = 0; i < reject_reason_count; ++i) {
    const auto reason = static_cast<reject_reason>(i);
    if (reason == reject_reason::runtime && !r.timed()) continue;
    row("  " + std::string(to_string(reason)), r.rejected[i]);
  }
  row("kept", r.kept);
  row("tried", r.tried);
  return s;
}

}  // namespace kforge::tasks::synth

#include "stages/reward_compile_baseline.hpp"

#include "stages/reward.hpp"
#include "tasks/measured_baselines.hpp"

namespace kforge::pipeline {

std::string compile_scale::describe() const {
  return std::to_string(ratio.size()) + " task(s) against torch.compile (mode " + mode + ", torch " +
         torch + ") measured on " + device + ", from " + file;
}

result<compile_scale> load_compile_scale(const reward_options& o) {
  if (o.baseline != reward_baseline::compile) return compile_scale{};
  auto b = tasks::read_measured_baselines(o.baselines);
  if (!b) return error{"[reward] baselines: " + b.message()};
  std::vector<std::string> with_times;
  for (const auto& d : b->devices())
    if (!b->compile_ratios(d).empty()) with_times.push_back(d);
  if (with_times.empty())
    return error{"[reward] baselines: " + o.baselines +
                 " holds no torch.compile time at the primary shapes (measured with --eager-only, "
                 "--shapes smallest, or every task failed)"};
  if (with_times.size() > 1) {
    std::string list;
    for (const auto& d : with_times) list += (list.empty() ? "" : ", ") + d;
    return error{"[reward] baselines: " + o.baselines + " holds compile times of several devices (" + list +
                 "): keep the lines of the sandbox's GPU model only"};
  }
  compile_scale s;
  s.file = o.baselines;
  s.device = with_times.front();
  s.mode = b->mode_of(s.device);
  s.torch = b->torch_of(s.device);
  s.ratio = b->compile_ratios(s.device);
  return s;
}

double reward_model::reference_scale(const std::string& task) {
  if (opt_.baseline != reward_baseline::compile) return 1.0;
  if (auto r = compile_.ratio.find(task); r != compile_.ratio.end()) return r->second;
  ++compile_missing_;
  return 0.0;
}

}  // namespace kforge::pipeline

#include "corpus/speed_drill.hpp"

#include <map>

#include "agent/observation.hpp"
#include "sandbox/verdict_json.hpp"

namespace kforge::corpus {

result<std::vector<speed_drill>> speed_drills(const std::vector<timed_variant>& variants, double min_gain,
                                              const gpu_facts& gpu) {
  // Each task's slowest and fastest timed variant, tasks in first-seen order.
  std::vector<std::string> order;
  std::map<std::string, std::pair<const timed_variant*, const timed_variant*>> extremes;
  const auto speed = [](const timed_variant& v) { return v.verdict.value("speedup", 0.0); };
  for (const auto& v : variants) {
    if (v.verdict.value("status", "") != "ok" || speed(v) <= 0) continue;
    auto [it, fresh] = extremes.try_emplace(v.task->id, &v, &v);
    if (fresh) order.push_back(v.task->id);
    if (speed(v) < speed(*it->second.first)) it->second.first = &v;
    if (speed(v) > speed(*it->second.second)) it->second.second = &v;
  }
  std::vector<speed_drill> out;
  agent::turn_context ctx;
  ctx.max_turns = 2;
  ctx.gpu = gpu;
  for (const auto& id : order) {
    const auto [slow, fast] = extremes.at(id);
    if (speed(*fast) < min_gain * speed(*slow)) continue;
    auto v = sandbox::verdict_from_json(slow->verdict);
    if (!v) return error{"speed drills: " + id + " (" + slow->variant.name + "): " + v.message()};
    v->candidate = std::make_unique<wire::CandidateT>();
    v->candidate->source = slow->variant.source;
    out.push_back({id, slow->variant.name, fast->variant.name, speed(*slow), speed(*fast), slow->prompt,
                   completion_text(slow->variant), agent::observation_template::embedded().render(*v, ctx, {}),
                   completion_text(fast->variant)});
  }
  return out;
}

}  // namespace kforge::corpus

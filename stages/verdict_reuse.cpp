#include "stages/verdict_reuse.hpp"

#include "common/hash.hpp"

namespace kforge::pipeline {

verdict_reuse::verdict_reuse(std::shared_ptr<actors::sandbox_logic> inner, verdict_reuse_scope scope,
                             std::size_t max_keys, std::size_t max_task_keys)
    : inner_(std::move(inner)), group_repeats_(max_keys) {
  if (scope == verdict_reuse_scope::task) task_repeats_.emplace(max_task_keys);
}

result<wire::VerdictT> verdict_reuse::evaluate(const wire::Candidate& c,
                                                const actors::envelope_info& info) {
  if (!c.source()) return inner_->evaluate(c, info);
  const auto source = c.source()->string_view();
  const std::string code = std::to_string(fnv1a64(source)) + ":" + std::to_string(source.size());
  // The group's key first, so that a repeat within its group counts as one whichever scope is
  // set; only the first of a group asks the task's key, and only that one may be judged.
  const auto judge = [&]() -> result<wire::VerdictT> {
    if (!task_repeats_) return inner_->evaluate(c, info);
    const std::string task_id = c.task() && c.task()->id() ? c.task()->id()->str() : "";
    const std::string key = std::to_string(c.prompt_hash()) + "\n" + task_id + "\n" + code;
    return task_repeats_->verdict(key, [&] { return inner_->evaluate(c, info); });
  };
  auto v = group_repeats_.verdict(std::to_string(c.group_id()) + "\n" + code, judge);
  if (v && v->reused) v->candidate.reset(c.UnPack());
  return v;
}

std::vector<std::pair<std::string, std::uint64_t>> verdict_reuse::take_counters() {
  auto out = inner_->take_counters();
  out.emplace_back("reused_verdicts", group_repeats_.take_reused());
  if (task_repeats_) out.emplace_back("reused_earlier_verdicts", task_repeats_->take_reused());
  return out;
}

}  // namespace kforge::pipeline

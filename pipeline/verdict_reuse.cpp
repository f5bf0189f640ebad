#include "pipeline/verdict_reuse.hpp"

namespace kforge::pipeline {

group_verdict_reuse::group_verdict_reuse(std::shared_ptr<actors::sandbox_logic> inner,
                                         std::size_t max_keys)
    : inner_(std::move(inner)), repeats_(max_keys) {}

result<wire::VerdictT> group_verdict_reuse::evaluate(const wire::Candidate& c,
                                                     const actors::envelope_info& info) {
  if (!c.source()) return inner_->evaluate(c, info);
  const std::string key = std::to_string(c.group_id()) + "\n" + c.source()->str();
  auto v = repeats_.verdict(key, [&] { return inner_->evaluate(c, info); });
  if (v && v->reused) v->candidate.reset(c.UnPack());
  return v;
}

std::vector<std::pair<std::string, std::uint64_t>> group_verdict_reuse::take_counters() {
  auto out = inner_->take_counters();
  out.emplace_back("reused_verdicts", repeats_.take_reused());
  return out;
}

}  // namespace kforge::pipeline

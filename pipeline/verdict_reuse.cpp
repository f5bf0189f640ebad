#include "pipeline/verdict_reuse.hpp"

#include <algorithm>

#include "messages/rollout_generated.h"

namespace kforge::pipeline {
namespace {

// A deep copy through the wire form (the object API types own their tables by unique_ptr).
wire::VerdictT copy_of(const wire::VerdictT& v) {
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(wire::Verdict::Pack(fbb, &v));
  wire::VerdictT out;
  flatbuffers::GetRoot<wire::Verdict>(fbb.GetBufferPointer())->UnPackTo(&out);
  return out;
}

result<wire::VerdictT> copy_of(const result<wire::VerdictT>& r) {
  if (!r) return r.err();
  return copy_of(*r);
}

bool reusable(const result<wire::VerdictT>& r) {
  return r.ok() && r->status != wire::VerdictStatus::infra_error;
}

}  // namespace

group_verdict_reuse::group_verdict_reuse(std::shared_ptr<actors::sandbox_logic> inner,
                                         std::size_t max_groups)
    : inner_(std::move(inner)), max_groups_(std::max<std::size_t>(1, max_groups)) {}

void group_verdict_reuse::forget(const key& k) {
  std::lock_guard lock(mu_);
  seen_.erase(k);
}

result<wire::VerdictT> group_verdict_reuse::evaluate(const wire::Candidate& c,
                                                     const actors::envelope_info& info) {
  if (!c.source()) return inner_->evaluate(c, info);
  key k{c.group_id(), c.source()->str()};
  std::promise<result<wire::VerdictT>> mine;
  verdict_future first;
  {
    std::lock_guard lock(mu_);
    if (auto it = seen_.find(k); it != seen_.end()) {
      first = it->second;
    } else {
      seen_.emplace(k, mine.get_future().share());
      if (std::find(groups_.begin(), groups_.end(), k.first) == groups_.end()) {
        groups_.push_back(k.first);
        if (groups_.size() > max_groups_) {
          const auto old = groups_.front();
          groups_.pop_front();
          for (auto it = seen_.lower_bound({old, std::string()}); it != seen_.end() && it->first.first == old;)
            it = seen_.erase(it);
        }
      }
    }
  }
  if (!first.valid()) {  // the first of its kind: judge it, then hand the verdict to any repeats
    try {
      auto r = inner_->evaluate(c, info);
      if (!reusable(r)) forget(k);
      mine.set_value(copy_of(r));
      return r;
    } catch (...) {
      forget(k);
      mine.set_value(error{"the identical candidate's evaluation threw"});
      throw;
    }
  }
  const auto& r = first.get();
  if (!reusable(r)) return inner_->evaluate(c, info);
  wire::VerdictT v = copy_of(*r);
  v.candidate.reset(c.UnPack());
  v.reused = true;
  v.compile_ms = v.verify_ms = v.time_ms = 0;
  std::lock_guard lock(mu_);
  ++reused_;
  return v;
}

std::vector<std::pair<std::string, std::uint64_t>> group_verdict_reuse::take_counters() {
  auto out = inner_->take_counters();
  std::lock_guard lock(mu_);
  out.emplace_back("reused_verdicts", reused_);
  reused_ = 0;
  return out;
}

}  // namespace kforge::pipeline

#include "sandbox/repeat_verdicts.hpp"

#include <algorithm>

namespace kforge::sandbox {
namespace {

// What is kept for the repeats: the verdict without its candidate (the completion, its tokens and
// log-probs: most of a verdict's bytes), which a repeat's copy replaces with its own anyway.
result<wire::VerdictT> kept_copy(const result<wire::VerdictT>& r) {
  if (!r) return r.err();
  auto v = copy_verdict(*r);
  v.candidate.reset();
  return v;
}

bool shareable(const result<wire::VerdictT>& r) {
  return r.ok() && r->status != wire::VerdictStatus::infra_error;
}

}  // namespace

wire::VerdictT copy_verdict(const wire::VerdictT& v) {
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(wire::Verdict::Pack(fbb, &v));
  wire::VerdictT out;
  flatbuffers::GetRoot<wire::Verdict>(fbb.GetBufferPointer())->UnPackTo(&out);
  return out;
}

repeat_verdicts::repeat_verdicts(std::size_t max_keys) : max_keys_(std::max<std::size_t>(1, max_keys)) {}

void repeat_verdicts::forget(const std::string& key) {
  std::lock_guard lock(mu_);
  seen_.erase(key);
  // Rare (a sandbox fault): a linear search keeps a stale entry from evicting the key once it is
  // added again, and from using up the capacity.
  if (auto it = std::find(order_.begin(), order_.end(), key); it != order_.end()) order_.erase(it);
}

result<wire::VerdictT> repeat_verdicts::verdict(const std::string& key,
                                                const std::function<result<wire::VerdictT>()>& judge) {
  std::promise<result<wire::VerdictT>> mine;
  shared first;
  {
    std::lock_guard lock(mu_);
    if (auto it = seen_.find(key); it != seen_.end()) {
      first = it->second;
    } else {
      seen_.emplace(key, mine.get_future().share());
      order_.push_back(key);
      if (order_.size() > max_keys_) {
        seen_.erase(order_.front());
        order_.pop_front();
      }
    }
  }
  if (!first.valid()) {  // the first of its kind: judge it, then hand the verdict to any repeats
    try {
      auto r = judge();
      if (!shareable(r)) forget(key);
      mine.set_value(kept_copy(r));
      return r;
    } catch (...) {
      forget(key);
      mine.set_value(error{"the judgment of the identical candidate threw"});
      throw;
    }
  }
  const auto& r = first.get();
  if (!shareable(r)) return judge();
  wire::VerdictT v = copy_verdict(*r);
  v.reused = true;
  v.compile_ms = v.verify_ms = v.time_ms = 0;
  std::lock_guard lock(mu_);
  ++reused_;
  return v;
}

std::uint64_t repeat_verdicts::take_reused() {
  std::lock_guard lock(mu_);
  return std::exchange(reused_, 0);
}

}  // namespace kforge::sandbox

#include "actors/stage_core.hpp"

#include "common/hash.hpp"

namespace kforge::actors {

namespace {
// splitmix64's finalizer: a bijection on 64 bits that scatters nearby inputs.
std::uint64_t mix(std::uint64_t z) noexcept {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
}  // namespace

std::uint64_t derive_sample_id(std::uint64_t parent, std::uint64_t index) noexcept {
  // For one parent, distinct indexes give distinct ids (both steps are bijections).
  return mix(mix(parent) + 0x9e3779b97f4a7c15ull * (index + 1));
}

stage_core::stage_core(std::string stage, std::string name) {
  metrics_.stage = std::move(stage);
  metrics_.name = std::move(name);
  name_hash_ = fnv1a64(metrics_.name);
}

messages::header stage_core::next_header(std::uint64_t sample_id, std::uint64_t policy_version) {
  messages::header h;
  // Unique across senders, not just within one: the broker tracks work by message id, and several
  // samplers feed one broker. The top 24 bits come from the sender's name, the rest count.
  h.message_id = (name_hash_ & 0xffffff0000000000ull) | (next_message_id_++ & 0xffffffffffull);
  h.sample_id = sample_id;
  h.sender = metrics_.name;
  h.policy_version = policy_version;
  return h;
}

std::uint64_t stage_core::new_sample_id() noexcept {
  return derive_sample_id(name_hash_, next_sample_++);
}

void stage_core::count_error(const error& e) {
  ++metrics_.errors;
  if (!fatal_) metrics_.last_error = metrics_.name + ": " + e.message;
}

void stage_core::count_fatal(const error& e) {
  ++metrics_.extra[fatal_counter];
  metrics_.last_error = metrics_.name + ": " + e.message;
  fatal_ = true;
}

void stage_core::record_call(std::int64_t ns) noexcept {
  latency_.record(ns);
  if (ns > 0) busy_ns_ += static_cast<std::uint64_t>(ns);  // a clock step back adds nothing
}

stage_metrics stage_core::snapshot(std::uint64_t queue_depth) const {
  auto m = metrics_;
  // Microseconds: finer than any logic call worth counting, and 2^64 of them outlast any run.
  m.extra[busy_counter] = busy_ns_ / 1000;
  m.queue_depth = queue_depth;
  m.logic_calls = latency_.count();
  m.latency_p50_us = latency_.quantile_us(0.50);
  m.latency_p99_us = latency_.quantile_us(0.99);
  return m;
}

}  // namespace kforge::actors

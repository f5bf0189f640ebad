#pragma once
// The real buffer logic (sample_buffer.hpp) behind the buffer actor's interface.

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "actors/logic_interfaces.hpp"
#include "common/log.hpp"
#include "stages/sample_buffer.hpp"
#include "stages/seen_kernels_journal.hpp"

namespace kforge::pipeline {

/// The sample buffer, its drop counters, and (with a journal) the kernels it sees for the first
/// time written down for a resume.
class buffer_stage final : public actors::buffer_logic {
 public:
  explicit buffer_stage(buffer_options o, std::optional<seen_kernels_journal> journal = {})
      : buffer_(o), journal_(std::move(journal)) {}
  result<actors::buffer_output> push(const wire::Scored& s,
                                     const actors::envelope_info& info) override {
    const auto before = dropped();
    const auto seen_before = buffer_.seen_kernels();
    actors::buffer_output out;
    // An episode is as old as its first turn, whose version the reward put in the sample
    // (agent/episode_turns.hpp); the envelope carries its last turn's.
    const auto* c = s.verdict() ? s.verdict()->candidate() : nullptr;
    const auto version = c && c->episode() ? std::min(info.policy_version, s.policy_version()) : info.policy_version;
    out.batches = buffer_.add(s, version);
    out.dropped = dropped() - before;
    if (journal_ && buffer_.seen_kernels() > seen_before) {
      const auto* c = s.verdict()->candidate();
      // Not writing it down loses nothing now, only the resume's memory of it: said once.
      if (auto w = journal_->append({c->prompt_hash(), c->code_hash()}); !w && !told_) {
        kforge::log::warn("kforge " + w.message() + " (a resumed run may train on it again)");
        told_ = true;
      }
    }
    return out;
  }
  sample_buffer& buffer() noexcept { return buffer_; }
  std::uint64_t set_policy_version(std::uint64_t v) override {
    const auto before = dropped();
    buffer_.set_policy_version(v);
    return dropped() - before;
  }
  std::uint64_t pending() const override { return buffer_.pending(); }
  /// dropped_duplicate, dropped_stale, dropped_excluded, dropped_small_group: the parts of the
  /// stage's `dropped` count (zero ones left out).
  std::vector<std::pair<std::string, std::uint64_t>> take_counters() override {
    std::vector<std::pair<std::string, std::uint64_t>> out;
    for (const auto& [name, field] : drop_reasons) {
      const std::uint64_t now = buffer_.counters().*field;
      if (now > reported_.*field) out.emplace_back(name, now - reported_.*field);
      reported_.*field = now;
    }
    return out;
  }
  const sample_buffer& buffer() const noexcept { return buffer_; }

 private:
  // Every way a sample leaves the buffer untrained: `dropped` is their sum.
  static constexpr std::pair<const char*, std::uint64_t buffer_counters::*> drop_reasons[] = {
      {"dropped_duplicate", &buffer_counters::duplicate},
      {"dropped_stale", &buffer_counters::stale},
      {"dropped_excluded", &buffer_counters::excluded},
      {"dropped_small_group", &buffer_counters::small_group},
  };
  std::uint64_t dropped() const noexcept {
    std::uint64_t n = 0;
    for (const auto& [name, field] : drop_reasons) n += buffer_.counters().*field;
    return n;
  }
  sample_buffer buffer_;
  buffer_counters reported_;  // what take_counters has reported
  std::optional<seen_kernels_journal> journal_;
  bool told_ = false;
};

}  // namespace kforge::pipeline

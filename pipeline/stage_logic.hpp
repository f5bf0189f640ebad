#pragma once
// The real reward and buffer logic (reward.hpp, sample_buffer.hpp) behind the actors' interfaces.

#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "actors/stage_logic.hpp"
#include "common/text_file.hpp"
#include "pipeline/best_kernels.hpp"
#include "pipeline/infra_error_log.hpp"
#include "pipeline/reward.hpp"
#include "pipeline/sample_buffer.hpp"
#include "pipeline/seen_kernels_journal.hpp"

namespace kforge::pipeline {

/// The reward formula, its counters (reported as the stage's extra metrics), the best kernel per
/// task (written under run_dir/best) and the reasons of infra_error verdicts
/// (run_dir/infra_errors.jsonl, the first one also on stderr); an empty run_dir writes nothing. With a `state_file`
/// the model's state is written there whenever the policy version of the samples moves on, and
/// when the stage ends at the process's shutdown (reward_state_file.hpp).
class reward_stage final : public actors::reward_logic {
 public:
  explicit reward_stage(reward_options o, std::string run_dir = {}, std::string state_file = {})
      : model_(o), best_(run_dir), infra_(std::move(run_dir)), state_file_(std::move(state_file)) {}
  ~reward_stage() override {
    try {
      save_state();
    } catch (...) {  // a destructor must not throw: the state stays as last saved
    }
  }
  reward_stage(const reward_stage&) = delete;
  reward_stage& operator=(const reward_stage&) = delete;

  result<std::optional<wire::ScoredT>> score(const wire::Verdict& v,
                                             const actors::envelope_info& info) override {
    // Saved before the first sample of a newer version: what the earlier versions made of it.
    // (Samples of older versions still arrive after it, and are saved with the next.)
    if (info.policy_version > saved_version_) {
      save_state();
      saved_version_ = info.policy_version;
    }
    auto s = model_.score(v, info.policy_version);
    counters_.add(v, s);
    unsaved_ = true;
    // A kernel that cannot be saved must not cost the sample its reward: counted, said once.
    if (auto b = best_.offer(v, info.policy_version); !b) {
      ++counters_.best_write_errors;
      if (!told_)
        std::cerr << "kforge reward: best kernel not saved: " << b.message()
                  << " (further failures are counted as best_write_errors)\n";
      told_ = true;
    } else if (*b) {
      ++counters_.best_updates;
    }
    // Its reason kept for after the run; a failure to keep it is said once, and scores alike.
    (void)infra_.offer(v, info.policy_version);
    return std::optional<wire::ScoredT>(std::move(s));
  }
  std::vector<std::pair<std::string, std::uint64_t>> take_counters() override {
    auto out = counters_.named();
    counters_ = {};
    return out;
  }
  const reward_model& model() const noexcept { return model_; }
  /// Goes on from a saved state (reward_model::to_json); an error says what was wrong with it.
  status restore(const std::string& state) { return model_.from_json(state); }

 private:
  // Not saving it loses nothing now, only a resumed run's memory of it: said once.
  void save_state() {
    if (state_file_.empty() || !unsaved_) return;
    unsaved_ = false;
    if (auto s = write_text_file_atomically(state_file_, model_.to_json()); !s && !state_told_) {
      std::cerr << "kforge reward: state not saved: " << s.message()
                << " (a resumed run would start every task's baseline anew)\n";
      state_told_ = true;
    }
  }

  reward_model model_;
  reward_counters counters_;  ///< since the last take_counters
  best_kernels best_;
  infra_error_log infra_;
  std::string state_file_;
  std::uint64_t saved_version_ = 0;  ///< the highest policy version scored
  bool unsaved_ = false;
  bool told_ = false;
  bool state_told_ = false;
};

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
    out.batches = buffer_.add(s, info.policy_version);
    out.dropped = dropped() - before;
    if (journal_ && buffer_.seen_kernels() > seen_before) {
      const auto* c = s.verdict()->candidate();
      // Not writing it down loses nothing now, only the resume's memory of it: said once.
      if (auto w = journal_->append({c->prompt_hash(), c->code_hash()}); !w && !told_) {
        std::cerr << "kforge " << w.message() << " (a resumed run may train on it again)\n";
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

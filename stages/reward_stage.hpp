#pragma once
// The real reward logic (reward.hpp) behind the reward actor's interface.

#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "actors/logic_interfaces.hpp"
#include "agent/episode_turns.hpp"
#include "common/log.hpp"
#include "common/text_file.hpp"
#include "stages/best_kernels.hpp"
#include "stages/infra_error_log.hpp"
#include "stages/reward.hpp"

namespace kforge::pipeline {

/// The reward formula, its counters (reported as the stage's extra metrics), the best kernel per
/// task (written under run_dir/best) and the reasons of infra_error verdicts
/// (run_dir/infra_errors.jsonl, the first one also on stderr); an empty run_dir writes nothing. With a `state_file`
/// the model's state is written there whenever the policy version of the samples moves on, and
/// when the stage ends at the process's shutdown (reward_state_file.hpp).
class reward_stage final : public actors::reward_logic {
 public:
  explicit reward_stage(reward_options o, std::string run_dir = {}, std::string state_file = {},
                        agent::episode_rules episodes = {}, compile_scale compile = {})
      : model_(o, std::move(compile)), best_(run_dir), infra_(std::move(run_dir)), state_file_(std::move(state_file)),
        episodes_(episodes) {}
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
    const auto missing_before = model_.compile_missing();
    auto s = model_.score(v, info.policy_version);
    counters_.add(v, s);
    if (model_.compile_missing() > missing_before) {  // [reward] baseline = "compile"
      ++compile_missing_;
      if (!compile_told_)
        kforge::log::warn("kforge reward: task " + task_of(v) + " has no torch.compile time in [reward] "
                          "baselines: its correct kernels get a neutral speed term (counted as "
                          "compile_baseline_missing)");
      compile_told_ = true;
    }
    unsaved_ = true;
    // A kernel that cannot be saved must not cost the sample its reward: counted, said once.
    if (auto b = best_.offer(v, info.policy_version); !b) {
      ++counters_.best_write_errors;
      if (!told_)
        kforge::log::warn("kforge reward: best kernel not saved: " + b.message() +
                          " (further failures are counted as best_write_errors)");
      told_ = true;
    } else if (*b) {
      ++counters_.best_updates;
    }
    // Its reason kept for after the run; a failure to keep it is said once, and scores alike.
    (void)infra_.offer(v, info.policy_version);
    // Every turn is scored by the formula above; the actor then sends it on as an observation
    // or ends its episode with it (agent/episode_turns.hpp).
    return std::optional<wire::ScoredT>(std::move(s));
  }
  bool goes_on(const wire::ScoredT& s) const override { return agent::goes_on(s, episodes_); }
  void end_episode(wire::ScoredT& s) const override { agent::finish_episode(s, episodes_); }
  std::vector<std::pair<std::string, std::uint64_t>> take_counters() override {
    auto out = counters_.named();
    if (compile_missing_) out.emplace_back("compile_baseline_missing", compile_missing_);
    counters_ = {};
    compile_missing_ = 0;
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
      kforge::log::warn("kforge reward: state not saved: " + s.message() +
                        " (a resumed run would start every task's baseline anew)");
      state_told_ = true;
    }
  }

  static std::string task_of(const wire::Verdict& v) {
    const auto* c = v.candidate();
    return c && c->task() && c->task()->id() ? c->task()->id()->str() : "?";
  }

  reward_model model_;
  reward_counters counters_;  ///< since the last take_counters
  std::uint64_t compile_missing_ = 0;  ///< since the last take_counters
  bool compile_told_ = false;
  best_kernels best_;
  infra_error_log infra_;
  std::string state_file_;
  agent::episode_rules episodes_;
  std::uint64_t saved_version_ = 0;  ///< the highest policy version scored
  bool unsaved_ = false;
  bool told_ = false;
  bool state_told_ = false;
};

}  // namespace kforge::pipeline

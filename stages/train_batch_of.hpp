#pragma once
// The trainer's plain batch (trainer/train_batch.hpp) of a TrainBatch message, as the trainer stage
// and its rank processes build it. Plain C++, no LibTorch.

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "messages/train_generated.h"
#include "trainer/train_batch.hpp"

namespace kforge::pipeline {

/// An episode's sample as the trainer takes it (agent/episode_turns.hpp): the task's prompt is the
/// prompt; the earlier turns, their observations and the last turn are the completion, and the loss
/// mask leaves the observations out; under reward = "turn_returns", each turn's return. The candidate's prompt_tokens held the whole context of the
/// last turn, completion_tokens and logprobs that turn's.
inline void as_episode(const wire::Episode& e, trainer::train_sample& t) {
  const std::size_t context = t.prompt_tokens.size();
  const std::size_t prompt = std::min<std::size_t>(e.prompt_size(), context);
  // FlatBuffers leaves an empty vector out: absent is empty.
  const std::vector<std::uint8_t> mask = e.context_mask() ? std::vector<std::uint8_t>(e.context_mask()->begin(), e.context_mask()->end())
                                                          : std::vector<std::uint8_t>{};
  const std::vector<float> logp = e.context_logprobs() ? std::vector<float>(e.context_logprobs()->begin(), e.context_logprobs()->end())
                                                       : std::vector<float>{};
  if (mask.size() != context || logp.size() != context) {
    t.excluded = "episode state does not match its context";  // never trained on, still counted
    return;
  }
  std::vector<std::int64_t> completion(t.prompt_tokens.begin() + static_cast<std::ptrdiff_t>(prompt),
                                       t.prompt_tokens.end());
  completion.insert(completion.end(), t.completion_tokens.begin(), t.completion_tokens.end());
  t.completion_mask.assign(mask.begin() + static_cast<std::ptrdiff_t>(prompt), mask.end());
  t.completion_mask.resize(completion.size(), 1);
  if (!t.logprobs.empty() || t.completion_tokens.empty()) {
    std::vector<float> lp(logp.begin() + static_cast<std::ptrdiff_t>(prompt), logp.end());
    lp.insert(lp.end(), t.logprobs.begin(), t.logprobs.end());
    t.logprobs = std::move(lp);
  }
  t.prompt_tokens.resize(prompt);
  t.completion_tokens = std::move(completion);
  if (e.turn_returns()) t.turn_returns.assign(e.turn_returns()->begin(), e.turn_returns()->end());
}

/// The trainer-side view of a TrainBatch message (policy_trainer's plain structs).
inline trainer::train_batch to_train_batch(const wire::TrainBatch& batch) {
  trainer::train_batch out;
  out.step = batch.step();
  if (!batch.groups()) return out;
  for (const auto* g : *batch.groups()) {
    trainer::sample_group group;
    group.prompt_hash = g->prompt_hash();
    group.group_id = g->group_id();
    if (g->draw_rewards()) group.draw_rewards.assign(g->draw_rewards()->begin(), g->draw_rewards()->end());
    if (g->samples())
      for (const auto* s : *g->samples()) {
        trainer::train_sample t;
        t.reward = s->reward();
        t.policy_version = s->policy_version();
        if (s->excluded()) t.excluded = s->excluded()->str();
        const auto* c = s->verdict() ? s->verdict()->candidate() : nullptr;
        if (c && c->prompt_tokens()) t.prompt_tokens.assign(c->prompt_tokens()->begin(), c->prompt_tokens()->end());
        if (c && c->completion_tokens())
          t.completion_tokens.assign(c->completion_tokens()->begin(), c->completion_tokens()->end());
        if (c && c->logprobs()) t.logprobs.assign(c->logprobs()->begin(), c->logprobs()->end());
        if (c && c->episode()) as_episode(*c->episode(), t);
        group.samples.push_back(std::move(t));
      }
    out.groups.push_back(std::move(group));
  }
  return out;
}

}  // namespace kforge::pipeline

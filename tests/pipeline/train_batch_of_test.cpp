// stages/train_batch_of.hpp: the trainer's plain batch of a TrainBatch message. A single-shot
// sample passes as it is; an episode's sample becomes the task's prompt and, as the completion, its
// turns with the observations between them, the loss mask 1 on the model's tokens only, and under
// reward = "turn_returns" every turn's return.
#include <doctest/doctest.h>

#include <flatbuffers/flatbuffers.h>

#include "stages/train_batch_of.hpp"

using namespace kforge;
using namespace kforge::pipeline;

namespace {

wire::ScoredT scored(std::vector<std::int32_t> context, std::vector<std::int32_t> completion,
                     std::vector<float> logprobs, double reward) {
  wire::ScoredT s;
  s.reward = reward;
  s.policy_version = 3;
  s.verdict = std::make_unique<wire::VerdictT>();
  s.verdict->candidate = std::make_unique<wire::CandidateT>();
  s.verdict->candidate->prompt_tokens = std::move(context);
  s.verdict->candidate->completion_tokens = std::move(completion);
  s.verdict->candidate->logprobs = std::move(logprobs);
  return s;
}

trainer::train_batch round_trip(wire::TrainBatchT& batch) {
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(wire::TrainBatch::Pack(fbb, &batch));
  return to_train_batch(*flatbuffers::GetRoot<wire::TrainBatch>(fbb.GetBufferPointer()));
}

}  // namespace

TEST_CASE("train batch of a message: single-shot samples as they are, an episode as prompt + turns") {
  wire::TrainBatchT batch;
  batch.step = 7;
  auto group = std::make_unique<wire::SampleGroupT>();
  group->draw_rewards = {0.5, 0.25};
  // Single shot: prompt {1, 2}, completion {3, 4}.
  group->samples.push_back(std::make_unique<wire::ScoredT>(scored({1, 2}, {3, 4}, {-1, -2}, 0.5)));
  // Episode, third turn: prompt {1, 2}; turn 1 {10, 11}, observation {20}; turn 2 {12},
  // observation {21, 22}; the last turn {13, 14} is the candidate's completion.
  auto ep = scored({1, 2, 10, 11, 20, 12, 21, 22}, {13, 14}, {-5, -6}, 0.75);
  auto& e = ep.verdict->candidate->episode = std::make_unique<wire::EpisodeT>();
  e->turn = 3;
  e->max_turns = 3;
  e->prompt_size = 2;
  e->context_mask = {0, 0, 1, 1, 0, 1, 0, 0};
  e->context_logprobs = {0, 0, -1, -2, 0, -3, 0, 0};
  e->turn_returns = {1.1, 0.3, 0.75};
  group->samples.push_back(std::make_unique<wire::ScoredT>(std::move(ep)));
  // An episode whose state does not match its context: excluded, still counted.
  auto bad = scored({1, 2, 10}, {13}, {-5}, 0.25);
  bad.verdict->candidate->episode = std::make_unique<wire::EpisodeT>();
  bad.verdict->candidate->episode->prompt_size = 2;
  bad.verdict->candidate->episode->context_mask = {0, 0};  // one short
  bad.verdict->candidate->episode->context_logprobs = {0, 0};
  group->samples.push_back(std::make_unique<wire::ScoredT>(std::move(bad)));
  batch.groups.push_back(std::move(group));

  const auto out = round_trip(batch);
  CHECK(out.step == 7);
  REQUIRE(out.groups.size() == 1);
  const auto& g = out.groups[0];
  CHECK(g.draw_rewards == std::vector<double>{0.5, 0.25});
  REQUIRE(g.samples.size() == 3);

  const auto& one = g.samples[0];
  CHECK(one.prompt_tokens == std::vector<std::int64_t>{1, 2});
  CHECK(one.completion_tokens == std::vector<std::int64_t>{3, 4});
  CHECK(one.completion_mask.empty());
  CHECK(one.turn_returns.empty());
  CHECK(one.reward == 0.5);
  CHECK(one.policy_version == 3);

  const auto& episode = g.samples[1];
  CHECK(episode.excluded.empty());
  CHECK(episode.prompt_tokens == std::vector<std::int64_t>{1, 2});
  CHECK(episode.completion_tokens == std::vector<std::int64_t>{10, 11, 20, 12, 21, 22, 13, 14});
  CHECK(episode.completion_mask == std::vector<std::uint8_t>{1, 1, 0, 1, 0, 0, 1, 1});
  CHECK(episode.logprobs == std::vector<float>{-1, -2, 0, -3, 0, 0, -5, -6});
  CHECK(episode.turn_returns == std::vector<double>{1.1, 0.3, 0.75});
  CHECK(episode.reward == 0.75);

  CHECK_FALSE(g.samples[2].excluded.empty());
}

#include "stages/episode_turn_sampler.hpp"

#include <memory>
#include <string>
#include <utility>

#include "agent/episode_turns.hpp"

namespace kforge::pipeline {

result<episode_turn_sampler> episode_turn_sampler::make(const agent_options& agent,
                                                        const sampler_options& sampling,
                                                        std::uint64_t run_seed) {
  auto t = agent.observation_template.empty()
               ? result<agent::observation_template>(agent::observation_template::embedded())
               : agent::observation_template::load(agent.observation_template);
  if (!t) return error{"agent.observation_template: " + t.message()};
  auto k = agent.feedback.empty() ? result<agent::feedback_kinds>(agent::feedback_kinds{})
                                  : agent::feedback_kinds::parse(agent.feedback);
  if (!k) return error{"agent.feedback: " + k.message()};
  return episode_turn_sampler(std::move(*t), *k, agent, sampling, run_seed);
}

std::vector<result<wire::CandidateT>> episode_turn_sampler::next_turns(
    engine_policy& policy, const std::vector<actors::sampler_logic::turn_item>& turns) const {
  std::vector<result<wire::CandidateT>> out(turns.size(), error{"not generated"});
  std::vector<std::unique_ptr<wire::ScoredT>> observed(turns.size());
  std::vector<agent::next_turn> next(turns.size());
  std::vector<std::size_t> index;  // of the turns that go to the policy
  std::vector<std::vector<std::int32_t>> contexts;
  std::vector<std::uint64_t> seeds;
  for (std::size_t i = 0; i < turns.size(); ++i) {
    observed[i].reset(turns[i].observed->UnPack());
    const auto& s = *observed[i];
    if (!s.verdict || !s.verdict->candidate) {
      out[i] = error{"observation " + std::to_string(turns[i].info.sample_id) + " carries no candidate"};
      continue;
    }
    const std::string text = template_.render(*s.verdict, agent::observed_turn(s), kinds_);
    auto ids = policy.follow_up_ids(text, s.verdict->candidate->completion_tokens);
    if (ids.size() > agent_.observation_max_tokens) ids.resize(agent_.observation_max_tokens);
    auto n = agent::prepare_next_turn(s, ids);
    if (!n) {
      out[i] = error{"observation " + std::to_string(turns[i].info.sample_id) + ": " + n.message()};
      continue;
    }
    next[i] = std::move(*n);
    index.push_back(i);
    contexts.push_back(next[i].context);
    seeds.push_back(group_seed(seed_, turns[i].info.sample_id) + next[i].episode.turn);
  }
  if (index.empty()) return out;
  auto gens = policy.continue_each(contexts, seeds, sampling_.temperature, sampling_.top_p,
                                   static_cast<int>(sampling_.max_new_tokens));
  if (!gens || gens->size() != index.size()) {
    const error e = gens ? error{"the policy continued " + std::to_string(gens->size()) + " of " +
                                 std::to_string(index.size()) + " episodes"}
                         : gens.err();
    for (const auto i : index) out[i] = e;
    return out;
  }
  for (std::size_t k = 0; k < index.size(); ++k) {
    const auto i = index[k];
    auto& g = (*gens)[k];
    std::string source = candidate_source(g.text);
    out[i] = agent::next_turn_candidate(*observed[i], std::move(next[i]), std::move(g.tokens),
                                        std::move(g.logprobs), std::move(g.text), std::move(source));
  }
  return out;
}

}  // namespace kforge::pipeline

#include "stages/episode_turn_sampler.hpp"

#include <memory>
#include <string>
#include <utility>

#include "agent/episode_turns.hpp"
#include "common/log.hpp"

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
  auto p = prepare(policy, turns);
  auto gens = continue_all(policy, p.contexts, p.seeds);
  return finish(std::move(p), std::move(gens));
}

episode_turn_sampler::pending_turns episode_turn_sampler::prepare(
    const engine_policy& policy, const std::vector<actors::sampler_logic::turn_item>& turns) const {
  pending_turns p;
  p.out.assign(turns.size(), error{"not generated"});
  p.observed.resize(turns.size());
  p.next.resize(turns.size());
  for (std::size_t i = 0; i < turns.size(); ++i) {
    p.observed[i].reset(turns[i].observed->UnPack());
    const auto& s = *p.observed[i];
    if (!s.verdict || !s.verdict->candidate) {
      p.out[i] = error{"observation " + std::to_string(turns[i].info.sample_id) + " carries no candidate"};
      continue;
    }
    const std::string text = template_.render(*s.verdict, agent::observed_turn(s), kinds_);
    auto n = agent::prepare_next_turn(s, observation_ids(policy, text, s.verdict->candidate->completion_tokens));
    if (!n) {
      p.out[i] = error{"observation " + std::to_string(turns[i].info.sample_id) + ": " + n.message()};
      continue;
    }
    p.next[i] = std::move(*n);
    p.index.push_back(i);
    p.contexts.push_back(p.next[i].context);
    p.seeds.push_back(group_seed(seed_, turns[i].info.sample_id) + p.next[i].episode.turn);
  }
  return p;
}

std::vector<result<wire::CandidateT>> episode_turn_sampler::finish(
    pending_turns p, std::vector<result<engine_policy::continuation>> gens) const {
  for (std::size_t k = 0; k < p.index.size(); ++k) {
    const auto i = p.index[k];
    if (k >= gens.size() || !gens[k]) {
      const std::string why = k < gens.size() ? gens[k].message() : "no continuation was generated";
      // The episode ends here rather than vanish: its group must still complete.
      if (!told_failure_)
        kforge::log::warn("kforge sampler: an episode's next turn was not generated (" + why +
                          "); such episodes end with an empty turn (said once)");
      told_failure_ = true;
      p.out[i] = agent::ended_turn_candidate(*p.observed[i], std::move(p.next[i]));
      continue;
    }
    auto& g = *gens[k];
    std::string source = candidate_source(g.text);
    p.out[i] = agent::next_turn_candidate(*p.observed[i], std::move(p.next[i]), std::move(g.tokens),
                                          std::move(g.logprobs), std::move(g.text), std::move(source));
  }
  return std::move(p.out);
}

std::vector<std::int32_t> episode_turn_sampler::observation_ids(const engine_policy& policy, const std::string& text,
                                                                const std::vector<std::int32_t>& previous) const {
  auto ids = policy.follow_up_ids(text, previous);
  if (ids.size() <= agent_.observation_max_tokens) return ids;
  // Too long: the text is cut, not the ids, so the message keeps its closing and the assistant's
  // turn still opens after it. The longest cut that fits, found by halving.
  static const std::string cut = "\n[... the rest of this feedback was cut]";
  std::size_t fits = 0, too_long = text.size();
  std::vector<std::int32_t> best = policy.follow_up_ids(cut, previous);
  while (too_long - fits > 1) {
    const std::size_t mid = fits + (too_long - fits) / 2;
    auto tried = policy.follow_up_ids(text.substr(0, mid) + cut, previous);
    if (tried.size() <= agent_.observation_max_tokens) {
      fits = mid;
      best = std::move(tried);
    } else {
      too_long = mid;
    }
  }
  return best;
}

std::vector<result<engine_policy::continuation>> episode_turn_sampler::continue_all(
    engine_policy& policy, const std::vector<std::vector<std::int32_t>>& contexts,
    const std::vector<std::uint64_t>& seeds) const {
  std::vector<result<engine_policy::continuation>> out(contexts.size(), error{"not generated"});
  if (!contexts.empty()) continue_range(policy, contexts, seeds, 0, contexts.size(), out);
  return out;
}

// A failed batch is split in halves down to single contexts, so one context the policy cannot take
// (grown past the model's context, say) fails alone, and a batch too large for the GPU's memory
// is generated in parts. (Falling back to each context alone made 64 episode turns that failed
// together take 64 generations one after another: minutes of a stalled sampler.)
void episode_turn_sampler::continue_range(engine_policy& policy, const std::vector<std::vector<std::int32_t>>& contexts,
                                          const std::vector<std::uint64_t>& seeds, std::size_t begin, std::size_t end,
                                          std::vector<result<engine_policy::continuation>>& out) const {
  const std::vector<std::vector<std::int32_t>> part(contexts.begin() + begin, contexts.begin() + end);
  const std::vector<std::uint64_t> part_seeds(seeds.begin() + begin, seeds.begin() + end);
  auto all = policy.continue_each(part, part_seeds, sampling_.temperature, sampling_.top_p,
                                  static_cast<int>(sampling_.max_new_tokens));
  if (all && all->size() == part.size()) {
    for (std::size_t k = 0; k < part.size(); ++k) out[begin + k] = std::move((*all)[k]);
    return;
  }
  const std::string why = all ? "the policy gave no continuation" : all.message();
  if (part.size() == 1) {
    out[begin] = error{why};
    return;
  }
  if (!told_split_)
    kforge::log::warn("kforge sampler: a batch of " + std::to_string(part.size()) + " episode turns failed (" + why +
                      "); failed batches are generated in halves (said once)");
  told_split_ = true;
  const std::size_t mid = begin + part.size() / 2;
  continue_range(policy, contexts, seeds, begin, mid, out);
  continue_range(policy, contexts, seeds, mid, end, out);
}

}  // namespace kforge::pipeline

#include "actors/sampler_actor.hpp"

#include <algorithm>
#include <iterator>

#include <caf/actor_system.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/stage_handlers.hpp"

namespace kforge::actors {

namespace {

using self_ptr = sampler_actor::stateful_pointer<sampler_state>;

// Sends one request's group downstream, or counts why there is none.
void emit(self_ptr self, const envelope_info& info, result<std::vector<wire::CandidateT>>& out) {
  auto& st = self->state;
  if (!out.ok()) {
    st.core.count_error(out.err());
    return;
  }
  auto& group = out.value();
  if (group.empty()) {
    st.core.count_dropped();
    return;
  }
  const auto group_size = static_cast<std::uint32_t>(group.size());
  for (std::uint32_t i = 0; i < group_size; ++i) {
    auto& c = group[i];
    c.group_id = info.sample_id;
    c.group_index = i;
    c.group_size = group_size;
    auto h = st.core.next_header(derive_sample_id(info.sample_id, i), st.policy_version);
    detail::forward(self, st.downstream, candidate_msg::pack(h, c));
  }
}

// Requests wait for a flush the actor sends itself behind the first of them, so that every request
// already in the mailbox by then is generated in the same batch.
void schedule_flush(self_ptr self) {
  auto& st = self->state;
  if (st.flush_sent) return;
  st.flush_sent = true;
  self->send(self, flush_atom_v);
}

void enqueue(self_ptr self, const generate_request_msg& m) {
  self->state.pending.push_back(m);
  schedule_flush(self);
}

// Up to `most` (at least one) of the waiting messages, oldest first; the rest wait for the next flush.
template <class Msg>
std::vector<Msg> take_front(self_ptr self, std::vector<Msg>& queue, std::size_t most) {
  const std::size_t take = std::min(queue.size(), std::max<std::size_t>(1, most));
  std::vector<Msg> batch(std::make_move_iterator(queue.begin()), std::make_move_iterator(queue.begin() + take));
  queue.erase(queue.begin(), queue.begin() + take);
  if (!queue.empty()) schedule_flush(self);
  return batch;
}

// Whether the logic answered every input; if not, each input counts an error.
bool as_many(self_ptr self, std::size_t answers, std::size_t inputs, const char* what, const char* of) {
  if (answers == inputs) return true;
  const error e{"the sampler logic returned " + std::to_string(answers) + " " + what + " for " +
                std::to_string(inputs) + " " + of};
  for (std::size_t i = 0; i < inputs; ++i) self->state.core.count_error(e);
  return false;
}

// Each observed episode's next turn downstream, under the sample id of its turn.
void emit_turns(self_ptr self, const std::vector<sampler_logic::turn_item>& items,
                std::vector<result<wire::CandidateT>>& out) {
  auto& st = self->state;
  if (!as_many(self, out.size(), items.size(), "turns", "observations")) return;
  for (std::size_t i = 0; i < items.size(); ++i) {
    auto& c = out[i];
    if (!c.ok()) {
      st.core.count_error(c.err());
      continue;
    }
    const std::uint64_t turn = c->episode ? c->episode->turn : 0;
    auto h = st.core.next_header(derive_sample_id(items[i].info.sample_id, turn), st.policy_version);
    detail::forward(self, st.downstream, candidate_msg::pack(h, *c));
  }
}

// Each request's group downstream.
void emit_groups(self_ptr self, const std::vector<sampler_logic::request_item>& items,
                 std::vector<result<std::vector<wire::CandidateT>>>& out) {
  if (!as_many(self, out.size(), items.size(), "results", "requests")) return;
  for (std::size_t i = 0; i < items.size(); ++i) emit(self, items[i].info, out[i]);
}

void take_observation(self_ptr self, scored_msg& m) {
  auto& st = self->state;
  st.core.count_extra("observations");
  if (!m.valid()) {
    st.core.count_error(error{"empty observation message"});
    return;
  }
  st.turns.push_back(std::move(m));
  schedule_flush(self);
}

// The turns' and the requests' candidates from calls of the logic, each kind on its own: the turns
// go on before the groups are generated, and an exception in one call loses only its own kind.
void generate_apart(self_ptr self, const std::vector<sampler_logic::turn_item>& turns,
                    const std::vector<sampler_logic::request_item>& requests) {
  auto& st = self->state;
  if (!turns.empty()) {
    using outputs = std::vector<result<wire::CandidateT>>;
    auto out = st.core.call([&]() -> result<outputs> { return st.logic->next_turns(turns); });
    if (out.ok()) emit_turns(self, turns, *out);
    else for (std::size_t i = 0; i < turns.size(); ++i) st.core.count_error(out.err());
  }
  if (!requests.empty()) {
    using outputs = std::vector<result<std::vector<wire::CandidateT>>>;
    auto out = st.core.call([&]() -> result<outputs> { return st.logic->generate_batch(requests); });
    if (out.ok()) emit_groups(self, requests, *out);
    else for (std::size_t i = 0; i < requests.size(); ++i) st.core.count_error(out.err());
  }
}

// The observed episodes' next turns (max_turn_batch of them, held while paused) and the waiting
// requests (max_batch): in one call of the logic where it generates both together, else apart.
void flush(self_ptr self) {
  auto& st = self->state;
  st.flush_sent = false;
  std::vector<scored_msg> turns;
  if (!st.paused && !st.turns.empty()) turns = take_front(self, st.turns, st.logic->max_turn_batch());
  std::vector<generate_request_msg> requests;
  if (!st.pending.empty()) requests = take_front(self, st.pending, st.logic->max_batch());
  if (turns.empty() && requests.empty()) return;
  std::vector<sampler_logic::turn_item> turn_items;
  turn_items.reserve(turns.size());
  for (const auto& m : turns) turn_items.push_back({&m.payload(), envelope_info::of(m.header())});
  std::vector<sampler_logic::request_item> request_items;
  request_items.reserve(requests.size());
  for (const auto& m : requests) request_items.push_back({&m.payload(), envelope_info::of(m.header())});
  if (turns.empty() || requests.empty() || !st.logic->generates_together()) {
    generate_apart(self, turn_items, request_items);
  } else {
    auto out = st.core.call([&]() -> result<sampler_logic::batch_results> {
      return st.logic->generate_together(request_items, turn_items);
    });
    if (out.ok()) {
      emit_turns(self, turn_items, out->turns);
      emit_groups(self, request_items, out->groups);
    } else {
      // The exception lost both: each kind again on its own, so that one kind's fault does not
      // end the other's episodes or groups.
      st.core.count_extra("joint_call_failures");
      generate_apart(self, turn_items, request_items);
    }
  }
  for (const auto& [counter, n] : st.logic->take_counters()) st.core.count_extra(counter, n);
}

void set_weights(self_ptr self, const policy_weights_msg& m) {
  auto& st = self->state;
  if (!m.valid()) {
    st.core.count_error(error{"empty policy weights message"});
    return;
  }
  const auto version = m.payload().version();
  if (version <= st.policy_version) {
    st.core.count_dropped();
    return;
  }
  auto s = st.core.call([&] { return st.logic->set_weights(m.payload()); });
  if (!s.ok()) {
    st.core.count_error(error{"weights version " + std::to_string(version) +
                              " not loaded, still at " + std::to_string(st.policy_version) +
                              ": " + s.message()});
    return;
  }
  st.policy_version = version;
}

// Observations held while paused wait for a flush once the stage runs again.
template <class Work>
void control(self_ptr self, const control_msg& m, const Work& work) {
  detail::control(self, m, work);
  if (!self->state.paused && !self->state.turns.empty()) schedule_flush(self);
}

}  // namespace

sampler_actor::behavior_type sampler_stage(self_ptr self, std::string name,
                                           std::shared_ptr<sampler_logic> logic,
                                           candidate_sink downstream,
                                           std::uint64_t policy_version) {
  auto& st = self->state;
  st.core = stage_core{"sampler", std::move(name)};
  st.logic = std::move(logic);
  st.downstream = std::move(downstream);
  st.policy_version = policy_version;
  auto work = [self](const generate_request_msg& m) { enqueue(self, m); };
  return {
      [=](generate_request_msg& m) { detail::accept(self, std::move(m), work); },
      [=](flush_atom) { flush(self); },
      [=](scored_msg& m) { take_observation(self, m); },
      [=](policy_weights_msg& m) { set_weights(self, m); },
      [=](const messages::envelope& e) {
        if (detail::route<generate_request_msg>(
                e, [&](generate_request_msg m) { detail::accept(self, std::move(m), work); }))
          return;
        if (detail::route<policy_weights_msg>(
                e, [&](policy_weights_msg m) { set_weights(self, m); }))
          return;
        if (detail::route<scored_msg>(e, [&](scored_msg m) { take_observation(self, m); })) return;
        if (detail::route<control_msg>(e, [&](control_msg m) { control(self, m, work); })) return;
        detail::reject(self, e, "GenerateRequest, Scored, PolicyWeights or Control");
      },
      [=](control_msg& m) { control(self, m, work); },
      [=](metrics_atom) {
        auto out = detail::metrics(self);
        out.queue_depth += self->state.pending.size() + self->state.turns.size();
        return out;
      },
  };
}

result<sampler_actor> spawn_sampler(caf::actor_system& sys, std::string name,
                                    std::shared_ptr<sampler_logic> logic,
                                    candidate_sink downstream, std::uint64_t policy_version,
                                    spawn_mode mode) {
  if (!logic) return error{"sampler \"" + name + "\": no sampler logic given"};
  if (mode == spawn_mode::detached)
    return sys.spawn<caf::detached>(sampler_stage, std::move(name), std::move(logic),
                                    std::move(downstream), policy_version);
  return sys.spawn(sampler_stage, std::move(name), std::move(logic), std::move(downstream),
                   policy_version);
}

}  // namespace kforge::actors

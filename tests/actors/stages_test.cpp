// The stage actors on CAF's deterministic test_coordinator, with fake logic behind them.

#include <doctest/doctest.h>

#include <algorithm>
#include <memory>
#include <set>
#include <vector>

#include <caf/typed_event_based_actor.hpp>

#include "actors/buffer_actor.hpp"
#include "actors/reward_actor.hpp"
#include "actors/sampler_actor.hpp"
#include "actors/sandbox_pool_actor.hpp"
#include "actors/task_generator_actor.hpp"
#include "actors/trainer_actor.hpp"
#include "tests/actors/caf_fixture.hpp"
#include "tests/actors/fake_logic.hpp"

namespace {

using namespace kforge;
using namespace kforge::actors;
using namespace kforge::actors::testing;

template <class Sink, class Msg>
typename Sink::behavior_type collector(typename Sink::pointer, std::shared_ptr<std::vector<Msg>> out) {
  return {[out](const Msg& m) { out->push_back(m); }};
}

/// A sink that keeps what it receives: the shape of a bus bridge's outgoing side. `out` is a spawn
/// argument: CAF 0.17 binds a reference through a null pointer for a function actor without any.
template <class Sink, class Msg>
Sink spawn_collector(caf::actor_system& sys, std::shared_ptr<std::vector<Msg>> out) {
  return sys.spawn(collector<Sink, Msg>, std::move(out));
}

messages::header test_header(std::uint64_t id, std::uint64_t version = 0) {
  messages::header h;
  h.message_id = id;
  h.sample_id = 500 + id;
  h.sender = "test";
  h.policy_version = version;
  return h;
}

candidate_msg make_candidate(std::uint64_t id, std::uint64_t code_hash) {
  wire::CandidateT c;
  c.code_hash = code_hash;
  c.group_id = 1;
  c.group_size = 1;
  return candidate_msg::pack(test_header(id), c);
}

control_msg make_control(wire::ControlCommand cmd) {
  wire::ControlT c;
  c.command = cmd;
  return control_msg::pack(test_header(0), c);
}

policy_weights_msg make_weights(std::uint64_t version) {
  wire::PolicyWeightsT w;
  w.version = version;
  return policy_weights_msg::pack(test_header(version, version), w);
}

generate_request_msg make_request(std::uint64_t id, std::uint32_t group_size) {
  wire::GenerateRequestT r;
  r.prompt = "prompt " + std::to_string(id);
  r.prompt_hash = id;
  r.group_size = group_size;
  return generate_request_msg::pack(test_header(id), r);
}

void check_balanced(const stage_metrics& m) {
  INFO(m.name);
  CHECK(m.errors == 0);
  CHECK(m.dropped == 0);
  CHECK(m.queue_depth == 0);
  CHECK(m.last_error.empty());
}

TEST_CASE_FIXTURE(caf_fixture, "the whole chain closes the loop: weights reach the sampler") {
  constexpr std::uint32_t group_size = 4;
  constexpr std::uint32_t requests_per_step = 2;
  auto tasks = std::make_shared<fake_task_source>(requests_per_step, group_size);
  auto sampling = std::make_shared<fake_sampler>();
  auto sandboxing = std::make_shared<fake_sandbox>();
  auto rewarding = std::make_shared<fake_reward>();
  auto buffering = std::make_shared<fake_buffer>();
  auto training = std::make_shared<fake_trainer>();

  // Spawned against the flow; the trainer -> sampler edge closes the cycle by subscription.
  auto trainer = spawn_trainer(sys, "trainer/0", training).value();
  auto buffer = spawn_buffer(sys, "buffer/0", buffering, trainer).value();
  auto reward = spawn_reward(sys, "reward/0", rewarding, buffer).value();
  auto sandbox = spawn_sandbox_pool(sys, "sandbox/0", sandboxing, reward).value();
  auto sampler = spawn_sampler(sys, "sampler/0", sampling, sandbox).value();
  auto generator = spawn_task_generator(sys, "tasks/0", tasks, {sampler}).value();
  self->send(trainer, caf::subscribe_atom_v, weights_sink{sampler});
  self->send(trainer, caf::subscribe_atom_v, weights_sink{buffer});
  sched.run();

  self->send(generator, step_atom_v, std::uint64_t{0});
  sched.run();

  // Step 0: 2 groups of 4 candidates, 2 batches, 2 new policy versions.
  REQUIRE(sandboxing->candidates.size() == 8);
  CHECK(training->batches.size() == 2);
  CHECK(sampling->loaded == std::vector<std::uint64_t>{1, 2});
  CHECK(buffering->versions == std::vector<std::uint64_t>{1, 2});
  // Weights switch between requests, never inside a group: versions never go back, and the four
  // candidates of a group share one.
  for (std::size_t i = 0; i < 8; ++i) {
    CHECK(sandboxing->candidates[i].policy_version ==
          sandboxing->candidates[i - i % group_size].policy_version);
    if (i > 0)
      CHECK(sandboxing->candidates[i].policy_version >=
            sandboxing->candidates[i - 1].policy_version);
  }

  self->send(generator, step_atom_v, std::uint64_t{1});
  sched.run();

  // Step 1 was generated entirely with the weights of step 0's two training steps.
  REQUIRE(sandboxing->candidates.size() == 16);
  for (std::size_t i = 8; i < 16; ++i) CHECK(sandboxing->candidates[i].policy_version == 2);
  CHECK(sampling->loaded == std::vector<std::uint64_t>{1, 2, 3, 4});

  // Headers: the sampler is the sender, with its own message ids; each candidate is its own
  // sample, and the verdict about it carries the same sample id and policy version.
  std::set<std::uint64_t> message_ids, sample_ids;
  for (const auto& c : sandboxing->candidates) {
    CHECK(c.sender == "sampler/0");
    message_ids.insert(c.message_id);
    sample_ids.insert(c.sample_id);
  }
  CHECK(message_ids.size() == 16);
  CHECK(sample_ids.size() == 16);
  REQUIRE(rewarding->verdicts.size() == 16);
  for (std::size_t i = 0; i < 16; ++i) {
    CHECK(rewarding->verdicts[i].sender == "sandbox/0");
    CHECK(rewarding->verdicts[i].sample_id == sandboxing->candidates[i].sample_id);
    CHECK(rewarding->verdicts[i].policy_version == sandboxing->candidates[i].policy_version);
    CHECK(rewarding->verdicts[i].key == sandboxing->candidates[i].key);
  }
  for (const auto& b : training->batches) CHECK(b.sender == "buffer/0");
  for (const auto& r : sampling->requests) CHECK(r.sender == "tasks/0");

  // Counts in = counts out, stage by stage.
  auto g = try_metrics(generator).value();
  CHECK(g.received == 2);
  CHECK(g.sent == 4);
  auto s = try_metrics(sampler).value();
  CHECK(s.received == 4);
  CHECK(s.sent == 4 * group_size);
  CHECK(s.logic_calls == 4 + 4);  // 4 requests, 4 weight loads
  auto p = try_metrics(sandbox).value();
  CHECK(p.received == 16);
  CHECK(p.sent == 16);
  auto r = try_metrics(reward).value();
  CHECK(r.received == 16);
  CHECK(r.sent == 16);
  auto b = try_metrics(buffer).value();
  CHECK(b.received == 16);
  CHECK(b.sent == 4);
  auto t = try_metrics(trainer).value();
  CHECK(t.received == 4);
  CHECK(t.sent == 4);
  for (const auto& m : {g, s, p, r, b, t}) check_balanced(m);
  CHECK(p.stage == "sandbox_pool");
  CHECK(p.latency_p99_us >= p.latency_p50_us);

  // A late subscriber (a bridge publishing weights, say) gets the latest weights at once.
  auto late = std::make_shared<std::vector<policy_weights_msg>>();
  self->send(trainer, caf::subscribe_atom_v,
             spawn_collector<weights_sink, policy_weights_msg>(sys, late));
  sched.run();
  REQUIRE(late->size() == 1);
  CHECK(late->front().payload().version() == 4);
  CHECK(late->front().header().policy_version() == 4);
  CHECK(late->front().header().sample_id() == 0);

  // The stages hold each other in a cycle (trainer -> sampler -> ... -> trainer), so they only go
  // away when told to; otherwise the actor system's destructor would wait for them forever.
  const auto shutdown = make_control(wire::ControlCommand::shutdown);
  self->send(generator, shutdown);
  self->send(sampler, shutdown);
  self->send(sandbox, shutdown);
  self->send(reward, shutdown);
  self->send(buffer, shutdown);
  self->send(trainer, shutdown);
  sched.run();
  CHECK_FALSE(try_metrics(trainer));
}

TEST_CASE_FIXTURE(caf_fixture, "a logic error is counted and the stage keeps going") {
  auto logic = std::make_shared<fake_sandbox>();
  logic->fail_hashes = {13};
  logic->throw_hashes = {14};
  auto out = std::make_shared<std::vector<verdict_msg>>();
  auto sandbox =
      spawn_sandbox_pool(sys, "sandbox/0", logic, spawn_collector<verdict_sink>(sys, out)).value();

  self->send(sandbox, make_candidate(1, 12));
  self->send(sandbox, make_candidate(2, 13));  // the logic returns an error
  self->send(sandbox, make_candidate(3, 14));  // the logic throws
  self->send(sandbox, candidate_msg{});        // no envelope at all
  self->send(sandbox, make_candidate(4, 15));
  sched.run();

  REQUIRE(out->size() == 2);
  CHECK((*out)[0].header().sample_id() == 501);
  CHECK((*out)[1].header().sample_id() == 504);
  CHECK((*out)[1].payload().candidate()->code_hash() == 15);
  auto m = try_metrics(sandbox).value();
  CHECK(m.received == 5);
  CHECK(m.sent == 2);
  CHECK(m.errors == 3);
  CHECK(m.received == m.sent + m.dropped + m.errors + m.queue_depth);
  CHECK(m.last_error == "sandbox/0: empty message (default-constructed, no envelope)");
}

TEST_CASE_FIXTURE(caf_fixture, "a bridge's envelope with the wrong payload is refused") {
  auto logic = std::make_shared<fake_sandbox>();
  auto out = std::make_shared<std::vector<verdict_msg>>();
  auto sandbox =
      spawn_sandbox_pool(sys, "sandbox/0", logic, spawn_collector<verdict_sink>(sys, out)).value();

  wire::VerdictT v;
  self->send(sandbox, messages::pack(test_header(1), v));  // a Verdict: wrong stage
  self->send(sandbox, make_candidate(2, 99).envelope());  // a Candidate: fine
  sched.run();

  REQUIRE(out->size() == 1);
  CHECK(logic->candidates.size() == 1);
  auto m = try_metrics(sandbox).value();
  CHECK(m.received == 2);
  CHECK(m.sent == 1);
  CHECK(m.errors == 1);
  CHECK(m.last_error == "sandbox/0: expected Candidate or Control, got Verdict");
}

TEST_CASE_FIXTURE(caf_fixture, "pause holds inputs in order, resume runs them, shutdown stops") {
  auto logic = std::make_shared<fake_sandbox>();
  auto out = std::make_shared<std::vector<verdict_msg>>();
  auto sandbox =
      spawn_sandbox_pool(sys, "sandbox/0", logic, spawn_collector<verdict_sink>(sys, out)).value();

  self->send(sandbox, make_control(wire::ControlCommand::pause));
  for (std::uint64_t i = 1; i <= 3; ++i) self->send(sandbox, make_candidate(i, 100 + i));
  sched.run();
  CHECK(out->empty());
  auto paused = try_metrics(sandbox).value();
  CHECK(paused.received == 3);
  CHECK(paused.sent == 0);
  CHECK(paused.queue_depth == 3);

  self->send(sandbox, make_control(wire::ControlCommand::resume));
  sched.run();
  REQUIRE(out->size() == 3);
  for (std::uint64_t i = 0; i < 3; ++i) CHECK((*out)[i].header().sample_id() == 501 + i);
  CHECK(try_metrics(sandbox).value().queue_depth == 0);

  // Control also arrives as a plain envelope from a bridge.
  self->send(sandbox, make_control(wire::ControlCommand::shutdown).envelope());
  sched.run();
  auto gone = try_metrics(sandbox);
  CHECK_FALSE(gone);
}

TEST_CASE_FIXTURE(caf_fixture, "the trainer checkpoints on command and reports the step") {
  auto logic = std::make_shared<fake_trainer>();
  auto out = std::make_shared<std::vector<policy_weights_msg>>();
  auto trainer = spawn_trainer(sys, "trainer/0", logic,
                               {spawn_collector<weights_sink, policy_weights_msg>(sys, out)})
                     .value();
  auto extra = [&](const char* name) -> std::optional<std::uint64_t> {
    const auto m = try_metrics(trainer).value();
    const auto it = m.extra.find(name);
    if (it == m.extra.end()) return std::nullopt;
    return it->second;
  };
  CHECK_FALSE(extra("checkpoint_step"));  // none written yet: nothing to report
  for (std::uint64_t i = 1; i <= 2; ++i) {
    wire::TrainBatchT b;
    b.step = i;
    self->send(trainer, train_batch_msg::pack(test_header(i), b));
  }
  // As the process runtime forwards it: an envelope from the control link.
  self->send(trainer, make_control(wire::ControlCommand::checkpoint).envelope());
  sched.run();
  CHECK(out->size() == 2);
  CHECK(logic->checkpoint_calls == 1);
  CHECK(extra("checkpoint_step") == std::optional<std::uint64_t>(2));
  CHECK(try_metrics(trainer).value().errors == 0);

  // A failed checkpoint is counted, and the last good one is still what is reported.
  logic->fail_checkpoint = true;
  self->send(trainer, make_control(wire::ControlCommand::checkpoint));
  sched.run();
  const auto m = try_metrics(trainer).value();
  CHECK(m.errors == 1);
  CHECK(m.last_error == "trainer/0: checkpoint: disk full");
  CHECK(extra("checkpoint_step") == std::optional<std::uint64_t>(2));

  // Other stages take the command and do nothing with it.
  auto verdicts = std::make_shared<std::vector<verdict_msg>>();
  auto sandbox = spawn_sandbox_pool(sys, "sandbox/0", std::make_shared<fake_sandbox>(),
                                    spawn_collector<verdict_sink>(sys, verdicts))
                     .value();
  self->send(sandbox, make_control(wire::ControlCommand::checkpoint));
  sched.run();
  CHECK(try_metrics(sandbox).value().errors == 0);
}

// A result the trainer could not write ends the run (the head reads fatal_errors); an ordinary
// error of a step or a checkpoint does not, and does not hide the fatal one's message.
TEST_CASE_FIXTURE(caf_fixture, "a result the trainer cannot write is its stage's fatal error") {
  auto logic = std::make_shared<fake_trainer>();
  auto out = std::make_shared<std::vector<policy_weights_msg>>();
  auto trainer = spawn_trainer(sys, "trainer/0", logic,
                               {spawn_collector<weights_sink, policy_weights_msg>(sys, out)})
                     .value();
  auto fatal = [&] {
    const auto m = try_metrics(trainer).value();
    const auto it = m.extra.find(fatal_counter);
    return it == m.extra.end() ? 0 : it->second;
  };
  auto train = [&](std::uint64_t step) {
    wire::TrainBatchT b;
    b.step = step;
    self->send(trainer, train_batch_msg::pack(test_header(step), b));
    sched.run();
  };
  logic->fail_checkpoint = true;  // an ordinary error: counted, not fatal
  self->send(trainer, make_control(wire::ControlCommand::checkpoint));
  sched.run();
  CHECK(try_metrics(trainer).value().errors == 1);
  CHECK(fatal() == 0);

  // The step's weights went out, but its log was not written.
  logic->unwritten = "run/train.jsonl: cannot write: No space left on device";
  train(1);
  CHECK(out->size() == 1);
  CHECK(fatal() == 1);
  CHECK(try_metrics(trainer).value().last_error ==
        "trainer/0: batch of step 1: run/train.jsonl: cannot write: No space left on device");

  // A later ordinary error is counted but leaves the cause in last_error; a later fatal one
  // (the final checkpoint) is counted and shown.
  self->send(trainer, make_control(wire::ControlCommand::checkpoint));
  sched.run();
  auto m = try_metrics(trainer).value();
  CHECK(m.errors == 2);
  CHECK(m.last_error ==
        "trainer/0: batch of step 1: run/train.jsonl: cannot write: No space left on device");
  logic->unwritten = "run/checkpoints/step-1.tmp: cannot create: File exists";
  self->send(trainer, make_control(wire::ControlCommand::checkpoint));
  sched.run();
  CHECK(fatal() == 2);
  CHECK(try_metrics(trainer).value().last_error ==
        "trainer/0: checkpoint: run/checkpoints/step-1.tmp: cannot create: File exists");
  train(2);  // nothing unwritten: no new fatal error
  CHECK(fatal() == 2);
  CHECK(out->size() == 2);
}

TEST_CASE_FIXTURE(caf_fixture, "the sampler tags candidates with the weights it really holds") {
  auto logic = std::make_shared<fake_sampler>();
  logic->refuse_versions = {5};
  auto out = std::make_shared<std::vector<candidate_msg>>();
  auto sampler =
      spawn_sampler(sys, "sampler/0", logic, spawn_collector<candidate_sink>(sys, out)).value();

  self->send(sampler, make_weights(1));
  self->send(sampler, make_weights(1));  // stale: dropped
  self->send(sampler, make_weights(5));  // fails to load: the sampler stays at 1
  self->send(sampler, make_request(1, 3));
  sched.run();
  self->send(sampler, make_weights(6).envelope());  // as from a bridge
  self->send(sampler, make_request(2, 2));
  sched.run();

  REQUIRE(out->size() == 5);
  for (std::size_t i = 0; i < 3; ++i) {
    const auto& c = (*out)[i];
    CHECK(c.header().policy_version() == 1);
    CHECK(c.payload().group_id() == 501);  // the request's sample id
    CHECK(c.payload().group_index() == i);
    CHECK(c.payload().group_size() == 3);
    CHECK(c.header().sample_id() == derive_sample_id(501, i));
  }
  for (std::size_t i = 3; i < 5; ++i) CHECK((*out)[i].header().policy_version() == 6);
  CHECK(logic->loaded == std::vector<std::uint64_t>{1, 6});
  auto m = try_metrics(sampler).value();
  CHECK(m.received == 2);
  CHECK(m.sent == 5);
  CHECK(m.dropped == 1);
  CHECK(m.errors == 1);
  CHECK(m.last_error.find("weights version 5 not loaded, still at 1") != std::string::npos);
}

TEST_CASE_FIXTURE(caf_fixture, "the sampler generates the requests waiting in its mailbox together") {
  auto logic = std::make_shared<fake_sampler>();
  logic->max_batch_requests = 2;
  auto out = std::make_shared<std::vector<candidate_msg>>();
  auto sampler =
      spawn_sampler(sys, "sampler/0", logic, spawn_collector<candidate_sink>(sys, out)).value();
  for (std::uint64_t i = 1; i <= 5; ++i) self->send(sampler, make_request(i, 2));
  // Weights that arrive behind waiting requests take effect before they are generated: the
  // candidates carry the version that really made them.
  self->send(sampler, make_weights(3));
  sched.run();
  CHECK(logic->batch_sizes == std::vector<std::size_t>{2, 2, 1});  // at most max_batch at once
  REQUIRE(out->size() == 10);
  for (std::size_t i = 0; i < out->size(); ++i) {
    CHECK((*out)[i].header().policy_version() == 3);
    CHECK((*out)[i].payload().group_id() == 500 + i / 2 + 1);  // in arrival order
  }
  auto m = try_metrics(sampler).value();
  CHECK(m.received == 5);
  CHECK(m.sent == 10);
  CHECK(m.queue_depth == 0);
}

TEST_CASE_FIXTURE(caf_fixture, "the buffer reports the samples it holds as queue depth") {
  auto logic = std::make_shared<fake_buffer>();
  auto out = std::make_shared<std::vector<train_batch_msg>>();
  auto buffer =
      spawn_buffer(sys, "buffer/0", logic, spawn_collector<batch_sink>(sys, out)).value();
  for (std::uint32_t i = 0; i < 2; ++i) {
    wire::ScoredT s;
    s.verdict = std::make_unique<wire::VerdictT>();
    s.verdict->candidate = std::make_unique<wire::CandidateT>();
    s.verdict->candidate->group_id = 77;
    s.verdict->candidate->group_size = 3;
    s.verdict->candidate->group_index = i;
    self->send(buffer, scored_msg::pack(test_header(i), s));
  }
  sched.run();
  CHECK(out->empty());
  auto m = try_metrics(buffer).value();
  CHECK(m.received == 2);
  CHECK(m.queue_depth == 2);
}

TEST_CASE_FIXTURE(caf_fixture, "the task generator takes tasks and spreads requests round robin") {
  auto tasks = std::make_shared<fake_task_source>(3, 2);
  auto a = std::make_shared<std::vector<generate_request_msg>>();
  auto b = std::make_shared<std::vector<generate_request_msg>>();
  auto generator = spawn_task_generator(sys, "tasks/0", tasks,
                                        {spawn_collector<request_sink>(sys, a),
                                         spawn_collector<request_sink>(sys, b)})
                       .value();
  wire::TaskT task;
  task.id = "l1/softmax_rows";
  self->send(generator, task_msg::pack(test_header(1), task));
  self->send(generator, step_atom_v, std::uint64_t{7});
  sched.run();
  CHECK(tasks->tasks == std::vector<std::string>{"l1/softmax_rows"});
  CHECK(a->size() == 2);
  CHECK(b->size() == 1);
  CHECK(a->front().payload().step() == 7);
  CHECK(a->front().header().sample_id() != b->front().header().sample_id());
  auto m = try_metrics(generator).value();
  CHECK(m.received == 2);
  CHECK(m.sent == 3);
}

scored_msg make_scored(std::uint64_t id, std::uint64_t code_hash, double reward,
                       std::uint64_t group_id = 0, std::uint32_t group_size = 1) {
  wire::ScoredT s;
  s.verdict = std::make_unique<wire::VerdictT>();
  s.verdict->candidate = std::make_unique<wire::CandidateT>();
  s.verdict->candidate->code_hash = code_hash;
  s.verdict->candidate->group_id = group_id;
  s.verdict->candidate->group_size = group_size;
  s.reward = reward;
  return scored_msg::pack(test_header(id), s);
}

TEST_CASE_FIXTURE(caf_fixture, "the task generator observes scored samples, typed or enveloped") {
  auto tasks = std::make_shared<fake_task_source>(1, 2);
  auto generator = spawn_task_generator(sys, "tasks/0", tasks, {}).value();
  // Groups: 70 of two (whole), 80 of two (one score back), 90 of one (whole).
  self->send(generator, make_scored(1, 11, 1.0, 70, 2));
  self->send(generator, make_scored(2, 12, 0.0, 70, 2).envelope());  // as a bus bridge delivers it
  self->send(generator, make_scored(3, 13, -1.0, 80, 2));            // the logic refuses this one
  // Feedback changes state only, so a paused generator takes it at once.
  self->send(generator, make_control(wire::ControlCommand::pause));
  self->send(generator, make_scored(4, 14, 0.5, 90, 1));
  sched.run();
  REQUIRE(tasks->observed.size() == 4);
  for (std::size_t i = 0; i < 4; ++i) {
    CHECK(tasks->observed[i].key == 11 + i);
    CHECK(tasks->observed[i].sample_id == 501 + i);  // the envelope's header reaches the logic
    CHECK(tasks->observed[i].sender == "test");
  }
  auto m = try_metrics(generator).value();
  CHECK(m.received == 4);
  CHECK(m.sent == 0);
  CHECK(m.extra.at("feedback") == 4);
  CHECK(m.extra.at("groups_judged") == 2);  // whose scores are all back: the head's refill reads it
  CHECK(m.errors == 1);
  CHECK(m.last_error == "tasks/0: no such task");
  const auto w = to_wire(m);
  REQUIRE(w.extra.size() == 3);  // "feedback", "groups_judged" and the busy time every stage reports
  const auto feedback = std::find_if(w.extra.begin(), w.extra.end(),
                                     [](const auto& c) { return c->name == "feedback"; });
  REQUIRE(feedback != w.extra.end());
  CHECK((*feedback)->value == 4);
}

TEST_CASE_FIXTURE(caf_fixture, "the reward sends each scored sample to buffer and feedback") {
  auto rewarding = std::make_shared<fake_reward>();
  auto tasks = std::make_shared<fake_task_source>(1, 2);
  auto scored = std::make_shared<std::vector<scored_msg>>();
  auto generator = spawn_task_generator(sys, "tasks/0", tasks, {}).value();
  auto reward = spawn_reward(sys, "reward/0", rewarding,
                             spawn_collector<scored_sink>(sys, scored), generator)
                    .value();
  const auto verdict = [](std::uint64_t id, std::uint64_t code_hash, wire::VerdictStatus st) {
    wire::VerdictT v;
    v.candidate = std::make_unique<wire::CandidateT>();
    v.candidate->code_hash = code_hash;
    v.status = st;
    return verdict_msg::pack(test_header(id), v);
  };
  self->send(reward, verdict(1, 21, wire::VerdictStatus::ok));
  // Dropped: an infra_error has no reward, so there is no feedback either.
  self->send(reward, verdict(2, 22, wire::VerdictStatus::infra_error));
  sched.run();
  REQUIRE(scored->size() == 1);
  REQUIRE(tasks->observed.size() == 1);
  CHECK(tasks->observed[0].key == 21);
  CHECK(tasks->observed[0].sender == "reward/0");
  CHECK(tasks->observed[0].sample_id == scored->front().header().sample_id());
  CHECK(tasks->observed[0].message_id == scored->front().header().message_id());
  auto r = try_metrics(reward).value();
  CHECK(r.received == 2);
  CHECK(r.sent == 1);  // the buffer's count only: "scored: reward sent = buffer received" holds
  CHECK(r.dropped == 1);
  CHECK(r.extra.at("feedback_sent") == 1);
  auto g = try_metrics(generator).value();
  CHECK(g.extra.at("feedback") == 1);
  CHECK(g.errors == 0);

  // Without a feedback sink nothing goes there and nothing extra is counted.
  auto alone = spawn_reward(sys, "reward/1", rewarding, spawn_collector<scored_sink>(sys, scored))
                   .value();
  self->send(alone, verdict(3, 23, wire::VerdictStatus::ok));
  sched.run();
  CHECK(scored->size() == 2);
  CHECK(tasks->observed.size() == 1);
  CHECK(try_metrics(alone).value().extra.count("feedback_sent") == 0);
}

TEST_CASE_FIXTURE(caf_fixture, "a stage without logic is not spawned") {
  auto s = spawn_sampler(sys, "sampler/9", nullptr, candidate_sink{});
  REQUIRE_FALSE(s.ok());
  CHECK(s.message() == "sampler \"sampler/9\": no sampler logic given");
  CHECK_FALSE(spawn_trainer(sys, "trainer/9", nullptr).ok());
}

}  // namespace

TEST_CASE_FIXTURE(caf_fixture, "the sampler continues the observed episodes waiting for it together, max_turn_batch at once") {
  auto logic = std::make_shared<fake_sampler>();
  logic->max_batch_requests = 1;  // requests one at a time; turns are batched by their own bound
  logic->max_turn_batch_size = 3;
  auto out = std::make_shared<std::vector<candidate_msg>>();
  auto sampler =
      spawn_sampler(sys, "sampler/0", logic, spawn_collector<candidate_sink>(sys, out)).value();
  for (std::uint64_t i = 1; i <= 7; ++i) self->send(sampler, make_scored(i, 100 + i, 0.0, 70, 2));
  sched.run();
  CHECK(logic->turn_batch_sizes == std::vector<std::size_t>{3, 3, 1});
  REQUIRE(out->size() == 7);
  for (std::size_t i = 0; i < out->size(); ++i) CHECK((*out)[i].payload().code_hash() == 100 + i + 2);
  auto m = try_metrics(sampler).value();
  CHECK(m.sent == 7);
  CHECK(m.queue_depth == 0);
}

TEST_CASE_FIXTURE(caf_fixture, "requests and observed episodes waiting together are generated in one call of the logic") {
  // An engine decodes them as one batch (sampler_logic::generate_together); two calls would take
  // about twice as long.
  auto logic = std::make_shared<fake_sampler>();
  logic->max_batch_requests = 2;
  logic->max_turn_batch_size = 2;
  auto out = std::make_shared<std::vector<candidate_msg>>();
  auto sampler =
      spawn_sampler(sys, "sampler/0", logic, spawn_collector<candidate_sink>(sys, out)).value();
  for (std::uint64_t i = 1; i <= 3; ++i) self->send(sampler, make_scored(i, 100 + i, 0.0, 70, 2));
  for (std::uint64_t i = 11; i <= 12; ++i) self->send(sampler, make_request(i, 3));
  sched.run();
  using calls = std::vector<std::pair<std::size_t, std::size_t>>;
  // The third observation waits for the next flush, alone: turns alone go to next_turns (the
  // fake's joint call also runs next_turns, for its 2).
  CHECK(logic->together_sizes == calls{{2, 2}});
  CHECK(logic->turn_batch_sizes == std::vector<std::size_t>{2, 1});
  REQUIRE(out->size() == 3 + 2 * 3);
  auto m = try_metrics(sampler).value();
  CHECK(m.sent == 9);
  CHECK(m.errors == 0);
  CHECK(m.queue_depth == 0);
}

TEST_CASE_FIXTURE(caf_fixture, "a sampler that does not generate together, or whose joint call throws, generates each kind apart") {
  for (const bool throws : {false, true}) {
    CAPTURE(throws);
    auto logic = std::make_shared<fake_sampler>();
    logic->max_batch_requests = 2;
    logic->max_turn_batch_size = 2;
    logic->together = throws;  // not together at all, or together and throwing
    logic->throw_together = throws;
    auto out = std::make_shared<std::vector<candidate_msg>>();
    auto sampler =
        spawn_sampler(sys, "sampler/0", logic, spawn_collector<candidate_sink>(sys, out)).value();
    for (std::uint64_t i = 1; i <= 2; ++i) self->send(sampler, make_scored(i, 100 + i, 0.0, 70, 2));
    for (std::uint64_t i = 11; i <= 12; ++i) self->send(sampler, make_request(i, 3));
    sched.run();
    CHECK(logic->together_sizes.size() == (throws ? 1u : 0u));
    CHECK(logic->turn_batch_sizes == std::vector<std::size_t>{2});
    CHECK(logic->batch_sizes == std::vector<std::size_t>{2});
    // The turns go on first, then the groups; nothing is lost to the joint call's exception.
    REQUIRE(out->size() == 2 + 2 * 3);
    CHECK((*out)[0].payload().code_hash() == 102);
    CHECK((*out)[1].payload().code_hash() == 103);
    auto m = try_metrics(sampler).value();
    CHECK(m.sent == 8);
    CHECK(m.errors == 0);
    CHECK(m.extra.count("joint_call_failures") == (throws ? 1u : 0u));
  }
}

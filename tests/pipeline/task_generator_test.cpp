// The task generator over the built-in library: full generation requests, curriculum feedback,
// tasks from the bus, determinism and checkpoints.
#include <doctest/doctest.h>

#include <map>
#include <memory>
#include <set>
#include <string>

#include "common/hash.hpp"
#include "messages/envelope.hpp"
#include "stages/task_generator.hpp"
#include "tasks/builtin.hpp"
#include "tasks/task_wire.hpp"

using namespace kforge;
using pipeline::task_generator;
using pipeline::task_generator_options;

namespace {

std::vector<tasks::task> library() {
  auto t = tasks::builtin_tasks();
  REQUIRE_MESSAGE(t.ok(), (t.ok() ? "" : t.message()));
  return std::move(t).value();
}

task_generator_options options(tasks::sampling_mode mode = tasks::sampling_mode::curriculum) {
  task_generator_options o;
  o.seed = 11;
  o.requests_per_step = 8;
  o.group_size = 4;
  o.temperature = 0.7f;
  o.top_p = 0.95f;
  o.max_new_tokens = 1024;
  o.curriculum.mode = mode;
  gpu_facts f;
  f.name = "NVIDIA H200";
  f.major = 9;
  f.sm_count = 132;
  f.l2_bytes = 62914560;
  o.hardware = f;
  return o;
}

std::shared_ptr<task_generator> make(const task_generator_options& o) {
  auto g = task_generator::create(library(), o);
  REQUIRE_MESSAGE(g.ok(), (g.ok() ? "" : g.message()));
  return *g;
}

std::vector<std::string> ids_of(const std::vector<wire::GenerateRequestT>& rs) {
  std::vector<std::string> v;
  for (const auto& r : rs) v.push_back(r.task->id);
  return v;
}

}  // namespace

TEST_CASE("a step's requests carry the task, its prompt and the sampling settings") {
  auto g = make(options());
  CHECK(g->pool_size() == library().size());
  auto rs = g->next(5);
  REQUIRE(rs.ok());
  REQUIRE(rs->size() == 8);
  std::set<std::string> distinct;
  for (const auto& r : *rs) {
    REQUIRE(r.task);
    distinct.insert(r.task->id);
    auto back = tasks::from_wire(*r.task);
    REQUIRE_MESSAGE(back.ok(), (back.ok() ? "" : back.message()));
    CHECK(r.prompt.find("## Task " + r.task->id) != std::string::npos);
    CHECK(r.prompt.find(r.task->reference.substr(0, r.task->reference.find('\n'))) !=
          std::string::npos);
    CHECK(r.prompt.find("- Name: NVIDIA H200") != std::string::npos);
    CHECK(r.prompt.find("- SMs: 132") != std::string::npos);
    CHECK(r.prompt.find("- 32-bit registers per SM: unknown") != std::string::npos);
    CHECK(r.prompt_hash == fnv1a64(r.prompt));
    CHECK(*g->prompt_of(r.task->id) == r.prompt);
    CHECK(r.group_size == 4);
    CHECK(r.temperature == doctest::Approx(0.7f));
    CHECK(r.top_p == doctest::Approx(0.95f));
    CHECK(r.max_new_tokens == 1024);
    CHECK(r.step == 5);
  }
  CHECK(distinct.size() == 8);  // no task twice in one step

  // The request survives packing into an envelope.
  auto env = messages::pack(messages::header{}, (*rs)[0]);
  const auto* req = env.as<wire::GenerateRequest>();
  REQUIRE(req);
  CHECK(req->prompt()->str() == (*rs)[0].prompt);
}

TEST_CASE("uniform sampling reaches every task of the library") {
  auto g = make(options(tasks::sampling_mode::uniform));
  std::set<std::string> seen;
  for (std::uint64_t step = 0; step < 300; ++step) {
    auto rs = g->next(step);
    REQUIRE(rs.ok());
    for (const auto& id : ids_of(*rs)) seen.insert(id);
  }
  CHECK(seen.size() == g->pool_size());
}

TEST_CASE("feedback steers the curriculum towards tasks solved about half the time") {
  auto g = make(options());
  const auto all = library();
  // Every task seen: all solved, except the first, which is solved half the time.
  for (const auto& t : all)
    for (int k = 0; k < 8; ++k) REQUIRE(g->observe(t.id, true, 1.0).ok());
  const std::string target = all.front().id;
  for (int k = 0; k < 32; ++k) REQUIRE(g->observe(target, k % 2 == 0, k % 2 == 0 ? 1.0 : 0.0).ok());
  int hits = 0;
  const int steps = 50;
  for (int step = 0; step < steps; ++step) {
    auto rs = g->next(static_cast<std::uint64_t>(step));
    REQUIRE(rs.ok());
    for (const auto& id : ids_of(*rs)) hits += id == target;
  }
  // Weight 0.27 against 0.02 for each solved task: over 13 times a solved task's chance. Check
  // at least 4 times what uniform sampling (8 of pool_size a step) would give.
  const double uniform_hits = steps * 8.0 / static_cast<double>(g->pool_size());
  CHECK(hits > 4 * uniform_hits);
  CHECK(g->curriculum().stats(*g->curriculum().find(target)).pass_rate == doctest::Approx(0.5));

  auto bad = g->observe("no/such_task", true, 1.0);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.message() == "task generator: curriculum: result for unknown task 'no/such_task'");
}

TEST_CASE("scored samples are feedback; excluded ones are ignored") {
  auto g = make(options());
  const std::string id = library().front().id;
  auto scored = [&](wire::VerdictStatus st, double reward, const std::string& excluded) {
    wire::ScoredT s;
    s.verdict = std::make_unique<wire::VerdictT>();
    s.verdict->status = st;
    s.verdict->candidate = std::make_unique<wire::CandidateT>();
    s.verdict->candidate->task = std::make_unique<wire::TaskT>();
    s.verdict->candidate->task->id = id;
    s.reward = reward;
    s.excluded = excluded;
    return messages::pack(messages::header{}, s);
  };
  const auto i = *g->curriculum().find(id);
  auto ok = scored(wire::VerdictStatus::ok, 1.5, "");
  REQUIRE(g->observe(*ok.as<wire::Scored>()).ok());
  auto wrong = scored(wire::VerdictStatus::wrong_answer, 0.0, "");
  REQUIRE(g->observe(*wrong.as<wire::Scored>()).ok());
  auto infra = scored(wire::VerdictStatus::infra_error, 0.0, "infra_error: GPU lost");
  REQUIRE(g->observe(*infra.as<wire::Scored>()).ok());
  const auto s = g->curriculum().stats(i);
  CHECK(s.total == 2);
  CHECK(s.pass_rate == doctest::Approx(0.5));
  CHECK(s.mean_reward == doctest::Approx(0.75));
}

TEST_CASE("a task from the bus joins the pool; a duplicate or bad one is an error") {
  auto g = make(options());
  auto t = library().front();
  actors::envelope_info info;
  info.sender = "synth.0";
  auto pack_task = [](const tasks::task& task) {
    auto w = tasks::to_wire(task);
    return messages::pack(messages::header{}, w);
  };

  auto dup = pack_task(t);
  auto s = g->add_task(*dup.as<wire::Task>(), info);
  REQUIRE_FALSE(s.ok());
  CHECK(s.message() ==
        "task generator: task '" + t.id + "' is already in the pool (from 'synth.0')");

  const auto before = g->pool_size();
  t.id = "synth/new_task";
  auto fresh = pack_task(t);
  REQUIRE(g->add_task(*fresh.as<wire::Task>(), info).ok());
  CHECK(g->pool_size() == before + 1);
  REQUIRE(g->prompt_of("synth/new_task"));
  CHECK(g->prompt_of("synth/new_task")->find("## Task synth/new_task") != std::string::npos);
  // Unseen, with the exploration bonus (weight 0.52 against 0.02 for a solved task), it comes up
  // within a few steps.
  for (const auto& x : library()) REQUIRE(g->observe(x.id, true, 1.0).ok());
  int found_at = -1;
  for (int step = 0; step < 20 && found_at < 0; ++step) {
    auto rs = g->next(static_cast<std::uint64_t>(step));
    REQUIRE(rs.ok());
    for (const auto& id : ids_of(*rs))
      if (id == "synth/new_task") found_at = step;
  }
  CHECK(found_at >= 0);

  t.id = "synth/bad";
  t.inputs[0].shape = {0};
  auto w = tasks::to_wire(t);
  auto bad_env = messages::pack(messages::header{}, w);
  s = g->add_task(*bad_env.as<wire::Task>(), info);
  REQUIRE_FALSE(s.ok());
  CHECK(s.message().find("task 'synth/bad' (wire): inputs[0].shape[0]") != std::string::npos);
}

TEST_CASE("requests are deterministic for a seed, and a checkpoint restores the state") {
  auto a = make(options());
  auto b = make(options());
  auto c = make([] {
    auto o = options();
    o.seed = 12;
    return o;
  }());
  std::vector<std::string> sa, sb, sc;
  for (std::uint64_t step = 0; step < 5; ++step) {
    for (const auto& id : ids_of(*a->next(step))) sa.push_back(id);
    for (const auto& id : ids_of(*b->next(step))) sb.push_back(id);
    for (const auto& id : ids_of(*c->next(step))) sc.push_back(id);
  }
  CHECK(sa == sb);
  CHECK(sa != sc);

  REQUIRE(a->observe(sa[0], true, 1.0).ok());
  auto restored = make(options());
  REQUIRE(restored->restore(a->checkpoint()).ok());
  CHECK(restored->checkpoint() == a->checkpoint());
  CHECK(ids_of(*restored->next(9)) == ids_of(*a->next(9)));

  // A checkpoint naming a task this pool lacks is an error.
  auto small = task_generator::create({library().front()}, options());
  REQUIRE(small.ok());
  auto s = (*small)->restore(a->checkpoint());
  REQUIRE_FALSE(s.ok());
  CHECK(s.message().find("is not in the pool") != std::string::npos);
}

TEST_CASE("bad construction is an error naming the reason") {
  auto empty = task_generator::create({}, options());
  REQUIRE_FALSE(empty.ok());
  CHECK(empty.message() == "task generator: the task pool is empty");

  auto o = options();
  o.prompt_template_path = "no/such/template.txt";
  auto missing = task_generator::create(library(), o);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.message() ==
        "task generator: prompt template no/such/template.txt: cannot open the file");

  auto twice = library();
  twice.push_back(twice.front());
  auto dup = task_generator::create(twice, options());
  REQUIRE_FALSE(dup.ok());
  CHECK(dup.message() == "task generator: task '" + twice.front().id + "' is already in the pool");
}

// The task source a run builds from its manifest's [tasks] table: the built-in library plus task
// files, the curriculum and prompt settings, the stand-in on request, and errors (never a
// fallback) for a bad file or template.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>

#include "messages/envelope.hpp"
#include "config/manifest.hpp"
#include "tests/pipeline/one_process_topology.hpp"
#include "stages/stage_factory.hpp"
#include "stages/task_generator.hpp"
#include "tasks/builtin.hpp"
#include "tasks/task_parser.hpp"
#include "tasks/task_wire.hpp"

using namespace kforge;
using namespace kforge::pipeline;
namespace fs = std::filesystem;

namespace {

bool has(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

struct temp_dir {
  fs::path path = fs::temp_directory_path() / ("kf-task-source-" + std::to_string(::getpid()));
  temp_dir() {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~temp_dir() { fs::remove_all(path); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name) << text;
    return (path / name).string();
  }
};

tasks::task builtin_task(std::size_t i) {
  auto all = tasks::builtin_tasks();
  REQUIRE_MESSAGE(all.ok(), (all.ok() ? "" : all.message()));
  REQUIRE(i < all->size());
  return (*all)[i];
}

/// A task file `name` in `dir` holding the first built-in task under a new id (no provenance, as a
/// user's file has none).
std::string one_task_file(const temp_dir& dir, const std::string& name, const std::string& id) {
  auto t = builtin_task(0);
  t.id = id;
  t.provenance.clear();
  return dir.write(name, tasks::to_json_line(t) + "\n");
}

/// The default manifest, its [tasks] table replaced by one whose body is `tasks_table` (read on a
/// minimal topology, since the default already has a [tasks] table; an empty body: every [tasks]
/// key left out).
manifest with_tasks(const std::string& tasks_table) {
  auto m = default_manifest();
  REQUIRE_MESSAGE(m.ok(), m.message());
  auto t = parse_manifest(testing::one_process_topology + "[tasks]\n" + tasks_table,
                          "test.toml");
  REQUIRE_MESSAGE(t.ok(), t.message());
  m->tasks = t->tasks;
  return *m;
}

}  // namespace

TEST_CASE("with [tasks] left out, the task source is the real generator over the built-in library") {
  const auto m = with_tasks("");
  auto source = make_task_source(m);
  REQUIRE_MESSAGE(source.ok(), source.message());
  auto* g = dynamic_cast<task_generator*>(source->get());
  REQUIRE(g != nullptr);
  CHECK(g->pool_size() == tasks::builtin_tasks()->size());
  CHECK(g->curriculum().options().mode == tasks::sampling_mode::curriculum);
  CHECK_FALSE(is_stand_in(actor_kind::task_generator, &m));
  CHECK(has(logic_description(actor_kind::task_generator, &m), "real: built-in task library"));

  auto rs = (*source)->next(0);
  REQUIRE(rs.ok());
  REQUIRE(rs->size() == static_cast<std::size_t>(m.buffer.groups_per_batch));
  for (const auto& r : *rs) {
    CHECK(has(r.task->provenance, "builtin:"));
    CHECK(has(r.prompt, "## Task " + r.task->id));
    CHECK(has(r.prompt, "- Name: unknown"));  // no [tasks.gpu]: the prompt does not guess
    CHECK(r.group_size == static_cast<std::uint32_t>(m.sampler.group_size));
  }

  // Feedback through the actor-facing interface reaches the curriculum.
  const std::string id = rs->front().task->id;
  wire::ScoredT s;
  s.verdict = std::make_unique<wire::VerdictT>();
  s.verdict->status = wire::VerdictStatus::ok;
  s.verdict->candidate = std::make_unique<wire::CandidateT>();
  s.verdict->candidate->task = std::make_unique<wire::TaskT>();
  s.verdict->candidate->task->id = id;
  s.reward = 1.0;
  auto env = messages::pack(messages::header{}, s);
  actors::envelope_info info;
  info.sender = "reward";
  info.sample_id = 77;
  REQUIRE((*source)->observe(*env.as<wire::Scored>(), info).ok());
  CHECK(g->curriculum().stats(*g->curriculum().find(id)).total == 1);
  s.verdict->candidate->task->id = "no/such_task";
  auto unknown = messages::pack(messages::header{}, s);
  auto bad = (*source)->observe(*unknown.as<wire::Scored>(), info);
  REQUIRE_FALSE(bad.ok());
  CHECK(has(bad.message(), "(sample 77 from 'reward')"));
}

TEST_CASE("[tasks] settings reach the generator: sampling, curriculum knobs, GPU, template") {
  temp_dir dir;
  const auto tmpl = dir.write("prompt.txt", "Task {{task_id}} on {{gpu_name}} ({{arch}})\n");
  const auto m = with_tasks("sampling = \"uniform\"\nwindow = 4\nfloor = 0.5\nunseen_bonus = 0\n"
                            "prompt_template = \"" + tmpl + "\"\n"
                            "[tasks.gpu]\nname = \"NVIDIA H200\"\ncompute_capability = \"9.0\"\n");
  const auto o = task_generator_options_from(m);
  CHECK(o.curriculum.mode == tasks::sampling_mode::uniform);
  CHECK(o.curriculum.window == 4);
  CHECK(o.curriculum.floor == doctest::Approx(0.5));
  CHECK(o.curriculum.unseen_bonus == 0);
  CHECK(o.hardware.name == "NVIDIA H200");
  CHECK(o.prompt_template_path == tmpl);
  auto g = make_task_generator(m);
  REQUIRE_MESSAGE(g.ok(), g.message());
  auto rs = (*g)->next(0);
  REQUIRE(rs.ok());
  // The target the sandbox compiles for on that GPU (Hopper's `a` one), not the bare sm_90.
  CHECK(rs->front().prompt == "Task " + rs->front().task->id + " on NVIDIA H200 (sm_90a)\n");
  const auto first_prompt = [](const manifest& mf) {
    auto gen = make_task_generator(mf);
    REQUIRE_MESSAGE(gen.ok(), gen.message());
    return (*gen)->next(0)->front().prompt;
  };
  // A set [sandbox] arch is what the prompts state.
  const std::string gpu = "prompt_template = \"" + tmpl + "\"\n[tasks.gpu]\nname = \"NVIDIA H200\"\n";
  auto set = with_tasks(gpu + "compute_capability = \"9.0\"\n");
  set.sandbox.arch = "sm_80";
  CHECK(has(first_prompt(set), "on NVIDIA H200 (sm_80)\n"));
  // auto with no compute capability to go by and no sandbox GPU (no GPU groups, so none is
  // asked, on any host): the compile-only sandbox's target.
  auto no_cc = with_tasks(gpu);
  no_cc.gpu_groups.clear();
  CHECK(has(first_prompt(no_cc), "on NVIDIA H200 (sm_90a)\n"));
  // The stand-in sandbox compiles nothing: the facts' own target, here unknown.
  no_cc.sandbox.backend = sandbox_backend::stand_in;
  CHECK(has(first_prompt(no_cc), "on NVIDIA H200 (unknown)\n"));

  // A template with an unknown placeholder stops the run at start-up, naming it.
  const auto broken = dir.write("broken.txt", "{{task_id}} {{gpu_nmae}}\n");
  auto e = make_task_source(with_tasks("prompt_template = \"" + broken + "\"\n"));
  REQUIRE_FALSE(e.ok());
  CHECK(has(e.message(), "unknown placeholder {{gpu_nmae}}"));
}

TEST_CASE("task files join the pool; a bad, empty or clashing file is an error naming it") {
  temp_dir dir;
  const auto good = one_task_file(dir, "good.jsonl", "mine/relu_copy");
  tasks_options o;
  o.files = {good};
  auto pool = task_pool(o);
  REQUIRE_MESSAGE(pool.ok(), pool.message());
  CHECK(pool->size() == tasks::builtin_tasks()->size() + 1);
  CHECK(pool->back().id == "mine/relu_copy");
  CHECK(pool->back().provenance == good);

  const auto m = with_tasks("files = [\"" + good + "\"]\n");
  auto source = make_task_source(m);
  REQUIRE_MESSAGE(source.ok(), source.message());
  CHECK(dynamic_cast<task_generator*>(source->get())->prompt_of("mine/relu_copy") != nullptr);
  CHECK(has(logic_description(actor_kind::task_generator, &m), "+ 1 task file(s)"));

  o.files = {good, (dir.path / "missing.jsonl").string()};
  auto missing = task_pool(o);
  REQUIRE_FALSE(missing.ok());
  CHECK(has(missing.message(), "tasks.files[1]: "));
  CHECK(has(missing.message(), "missing.jsonl"));

  o.files = {dir.write("bad.jsonl", "{\"id\": \"x\"}\n")};
  auto bad = task_pool(o);
  REQUIRE_FALSE(bad.ok());
  CHECK(has(bad.message(), "tasks.files[0]: "));
  CHECK(has(bad.message(), "bad.jsonl:1"));

  o.files = {dir.write("empty.jsonl", "\n")};
  auto empty = task_pool(o);
  REQUIRE_FALSE(empty.ok());
  CHECK(has(empty.message(), "tasks.files[0]: " + o.files[0] + " holds no tasks"));

  auto clash = builtin_task(1);
  o.files = {dir.write("clash.jsonl", tasks::to_json_line(clash) + "\n")};
  auto twice = task_pool(o);
  REQUIRE_FALSE(twice.ok());
  CHECK(has(twice.message(), "task '" + clash.id + "' is already in the pool (from builtin:"));

  // Through the factory, the same errors: no silent fallback to the stand-in.
  const auto nope = (dir.path / "nope.jsonl").string();
  auto e = make_task_source(with_tasks("files = [\"" + nope + "\"]\n"));
  REQUIRE_FALSE(e.ok());
  CHECK(has(e.message(), "tasks.files[0]"));
}

TEST_CASE("source = \"files\": the pool is the task files alone, without the built-ins") {
  temp_dir dir;
  const auto good = one_task_file(dir, "only.jsonl", "mine/only");
  tasks_options o;
  o.source = task_source_kind::files;
  o.files = {good};
  auto pool = task_pool(o);
  REQUIRE_MESSAGE(pool.ok(), pool.message());
  REQUIRE(pool->size() == 1);
  CHECK(pool->front().id == "mine/only");
  // A built-in task in the file is no clash here: the built-ins are not in the pool.
  o.files = {dir.write("builtin.jsonl", tasks::to_json_line(builtin_task(1)) + "\n")};
  CHECK(task_pool(o).ok());
  o.files.clear();
  auto none = task_pool(o);
  REQUIRE_FALSE(none.ok());
  CHECK(has(none.message(), "tasks.files names no task file"));

  const auto m = with_tasks("source = \"files\"\nfiles = [\"" + good + "\"]\n");
  auto source = make_task_source(m);
  REQUIRE_MESSAGE(source.ok(), source.message());
  CHECK(dynamic_cast<task_generator*>(source->get())->prompt_of("mine/only") != nullptr);
  CHECK(dynamic_cast<task_generator*>(source->get())->prompt_of(builtin_task(0).id) == nullptr);
  CHECK(logic_description(actor_kind::task_generator, &m).rfind("real: 1 task file(s), ", 0) == 0);
}

TEST_CASE("source = \"stand-in\" keeps the synthetic tasks, and says so") {
  const auto m = with_tasks("source = \"stand-in\"\n");
  auto source = make_task_source(m);
  REQUIRE_MESSAGE(source.ok(), source.message());
  CHECK(dynamic_cast<task_generator*>(source->get()) == nullptr);
  auto rs = (*source)->next(0);
  REQUIRE(rs.ok());
  CHECK(has(rs->front().task->id, "stand-in/"));
  CHECK(is_stand_in(actor_kind::task_generator, &m));
  CHECK(has(logic_description(actor_kind::task_generator, &m), "stand-in"));
  // Feedback to the stand-in is accepted and ignored (actors::task_source's default).
  wire::ScoredT s;
  auto env = messages::pack(messages::header{}, s);
  CHECK((*source)->observe(*env.as<wire::Scored>(), actors::envelope_info{}).ok());
}

TEST_CASE("a run's curriculum is saved every step, and a resumed run goes on from it") {
  temp_dir dir;
  const auto m = with_tasks("");
  const auto run_dir = dir.path.string();
  const auto state = curriculum_state_file(run_dir);
  auto first = make_task_source(m, run_dir, false);
  REQUIRE_MESSAGE(first.ok(), first.message());
  auto* g = dynamic_cast<task_generator*>(first->get());
  REQUIRE(g != nullptr);
  auto rs = g->next(0);
  REQUIRE(rs.ok());
  const auto id = rs->front().task->id;
  for (int k = 0; k < 3; ++k) REQUIRE(g->observe(id, true, 1.0).ok());
  REQUIRE(g->next(1).ok());  // each step's draw writes the state
  REQUIRE(fs::exists(state));

  // Resumed: the same per-task results and generator state, so the same next draw.
  auto resumed = make_task_source(m, run_dir, true);
  REQUIRE_MESSAGE(resumed.ok(), resumed.message());
  auto* r = dynamic_cast<task_generator*>(resumed->get());
  CHECK(r->checkpoint() == g->checkpoint());
  const auto idx = r->curriculum().find(id);
  REQUIRE(idx.has_value());
  CHECK(r->curriculum().stats(*idx).total == 3);
  // Not resumed: every task starts unseen.
  auto fresh = make_task_source(m, run_dir, false);
  REQUIRE(fresh.ok());
  CHECK(dynamic_cast<task_generator*>(fresh->get())->curriculum().stats(*idx).total == 0);

  // A damaged state file stops the resume, naming it.
  dir.write("curriculum.json", "{\"tasks\": 3}");
  auto bad = make_task_source(m, run_dir, true);
  REQUIRE_FALSE(bad.ok());
  CHECK(has(bad.message(), state + ": task generator: curriculum state: "));

  // A task that came over the bus in the first leg is not in the resumed pool: left out, said.
  auto with_bus = make_task_source(m, run_dir, false);
  REQUIRE(with_bus.ok());
  auto* b = dynamic_cast<task_generator*>(with_bus->get());
  auto t = tasks::to_wire(builtin_task(0));
  t.id = "bus/relu_copy";
  const auto env = messages::pack(messages::header{}, t);
  REQUIRE(b->add_task(*env.as<wire::Task>(), actors::envelope_info{}).ok());
  REQUIRE(b->next(0).ok());
  auto after_bus = make_task_source(m, run_dir, true);
  REQUIRE_MESSAGE(after_bus.ok(), after_bus.message());
  CHECK_FALSE(dynamic_cast<task_generator*>(after_bus->get())->curriculum().find("bus/relu_copy"));
}

TEST_CASE("the default's task files load, and none of their tasks is a held-out one") {
  // The held-out measure (deploy/heldout_eval.sh) is only honest while RL never sees its tasks.
  const fs::path root(KFORGE_SOURCE_DIR);
  auto m = default_manifest();
  REQUIRE_MESSAGE(m.ok(), (m.ok() ? "" : m.message()));
  auto heldout = tasks::load_task_file((root / "models/kforge-tiny/heldout_tasks.jsonl").string());
  REQUIRE_MESSAGE(heldout.ok(), (heldout.ok() ? "" : heldout.message()));
  REQUIRE(heldout->size() == 57);
  std::set<std::string> heldout_ids, heldout_refs;
  for (const auto& t : *heldout) {
    heldout_ids.insert(t.id);
    heldout_refs.insert(t.reference);
  }
  std::size_t n = 0;
  for (const auto& f : m->tasks.files) {
    auto pool = tasks::load_task_file((root / f).string());
    REQUIRE_MESSAGE(pool.ok(), (pool.ok() ? "" : pool.message()));
    for (const auto& t : *pool) {
      INFO(f << ": " << t.id);
      CHECK_FALSE(heldout_ids.count(t.id));
      // The synthesized ones were also kept apart by reference (make_tiny.sh --steps rlpool). The
      // built-in split is by id: 5 train built-ins share a held-out one's reference at other shapes.
      if (t.id.rfind("synth/", 0) == 0) CHECK_FALSE(heldout_refs.count(t.reference));
    }
    n += pool->size();
  }
  CHECK(n == 58 + 96);  // the train split and the unseen pool
}

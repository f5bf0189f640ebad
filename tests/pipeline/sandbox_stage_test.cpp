// The nvcc sandbox backend of the sandbox_worker stage: a Candidate message in, a real verdict
// out — compile-only on a host without a GPU (CI), verified and timed where one is visible.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "bus/broker.hpp"
#include "bus/channel.hpp"
#include "common/child_process.hpp"
#include "common/hash.hpp"
#include "messages/envelope.hpp"
#include "messages/rollout_generated.h"
#include "config/manifest.hpp"
#include "runtime/sandbox_service.hpp"
#include "stages/sandbox_stage.hpp"
#include "stages/stage_factory.hpp"
#include "sandbox/runner.hpp"
#include "sandbox/toolchain.hpp"
#include "tasks/builtin.hpp"
#include "tasks/task_wire.hpp"

using namespace kforge;

namespace {

/// The default manifest: its sandbox is the real one (backend "nvcc").
result<pipeline::manifest> nvcc_manifest(const std::string& run_dir) {
  auto m = pipeline::default_manifest();
  if (m) m->run.run_dir = run_dir;
  return m;
}

// A running broker as the sandbox pool runs one: work in at `producer`, verdicts out at `sink`.
struct broker_rig {
  result<bus::receiver> sink = bus::receiver::bind("tcp://127.0.0.1:*");
  result<bus::broker> broker = make_broker();
  result<bus::sender> producer = broker.ok() ? bus::sender::connect(broker->frontend_endpoint())
                                             : result<bus::sender>(error{"no broker"});
  broker_rig() {
    REQUIRE(sink.ok());
    REQUIRE(broker.ok());
    REQUIRE(producer.ok());
  }

 private:
  result<bus::broker> make_broker() {
    if (!sink.ok()) return error{"no sink"};
    bus::broker_options bo;
    bo.results = {sink->last_endpoint(), bus::link::connect};
    auto b = bus::broker::create(std::move(bo));
    if (b.ok())
      if (auto st = b->start(); !st.ok()) return error{st.message()};
    return b;
  }
};

wire::CandidateT candidate_t(const tasks::task& t, const std::string& source,
                             const std::string& completion = "") {
  wire::CandidateT c;
  c.task.reset(new wire::TaskT(tasks::to_wire(t)));
  c.source = source;
  c.completion = completion;
  c.code_hash = fnv1a64(source);
  c.group_id = 7;
  c.group_size = 1;
  return c;
}

flatbuffers::DetachedBuffer candidate_for(const tasks::task& t, const std::string& source,
                                          const std::string& completion = "") {
  const auto c = candidate_t(t, source, completion);
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(wire::Candidate::Pack(fbb, &c));
  return fbb.Release();
}

/// A built-in task by id (the test fails if it is missing).
std::optional<tasks::task> builtin_task(const std::string& id) {
  auto library = tasks::builtin_tasks();
  REQUIRE(library.ok());
  for (const auto& t : *library)
    if (t.id == id) return t;
  FAIL("no built-in task " << id);
  return std::nullopt;
}

}  // namespace

TEST_CASE("sandbox.backend = \"nvcc\": candidates get real verdicts through the stage logic") {
  if (!sandbox::find_toolchain()) {
    MESSAGE("SKIP: nvcc not found");
    return;
  }
  ::setenv("KFORGE_SANDBOX_PROGRAM", KFORGE_BINARY, 1);  // the children live in kforge
  const auto dir = std::filesystem::temp_directory_path() / "kforge-sandbox-stage-test";
  std::filesystem::remove_all(dir);
  auto m = nvcc_manifest(dir.string());
  REQUIRE_MESSAGE(m.ok(), (m.ok() ? "" : m.message()));
  CHECK(!pipeline::is_stand_in(pipeline::actor_kind::sandbox_worker, &*m));
  CHECK(pipeline::is_stand_in(pipeline::actor_kind::sandbox_worker));
  auto logic = pipeline::make_sandbox_logic(*m);
  REQUIRE_MESSAGE(logic.ok(), (logic.ok() ? "" : logic.message()));
  auto again = pipeline::make_sandbox_logic(*m);
  REQUIRE(again.ok());
  CHECK(again->get() == logic->get());  // one pool per process

  const auto relu = builtin_task("l1/relu");
  const auto gpus = pipeline::stage_gpus(*m, pipeline::actor_kind::sandbox_worker);
  REQUIRE(gpus.ok());
  const bool gpu = !gpus->empty();

  const auto good = candidate_for(*relu, sandbox::known_good_candidate());
  auto v = (*logic)->evaluate(*flatbuffers::GetRoot<wire::Candidate>(good.data()), {});
  REQUIRE(v.ok());
  CHECK_MESSAGE(v->status == (gpu ? wire::VerdictStatus::ok : wire::VerdictStatus::compiled),
                v->reason);
  REQUIRE(v->candidate);
  CHECK(v->candidate->group_id == 7);
  // Where its time went, once: nvcc's time (a fresh cache: it compiled), then nothing new.
  std::map<std::string, std::uint64_t> took;
  for (const auto& [name, n] : (*logic)->take_counters()) took[name] = n;
  CHECK(took.at("compile_us") > 0);
  CHECK(took.at("compile_us") == static_cast<std::uint64_t>(v->compile_ms * 1000));
  CHECK(took.count("gpu_wait_us") == 1);
  CHECK(took.count("trials_us") == 1);
  CHECK((gpu || took.at("trials_us") == 0));  // compile-only: nothing ran
  for (const auto& [name, n] : (*logic)->take_counters()) CHECK_MESSAGE(n == 0, name);

  const auto bad = candidate_for(*relu, "#include <unistd.h>\n" + std::string(sandbox::known_good_candidate()));
  v = (*logic)->evaluate(*flatbuffers::GetRoot<wire::Candidate>(bad.data()), {});
  REQUIRE(v.ok());
  CHECK(v->status == wire::VerdictStatus::rejected);

  // An answer cut off inside its ```cuda block reaches the sandbox whole (candidate_source's
  // fallback): rejected with the reason, nothing compiled (tasks::fenced_answer_problem, tested
  // without nvcc in test_tasks). A bare kernel without a fence line is compiled as before.
  const std::string good_source(sandbox::known_good_candidate());
  const std::string cut = "The reference computes relu.\n\n```cuda\n" + good_source.substr(0, good_source.size() / 2);
  const auto truncated = candidate_for(*relu, cut, cut);
  v = (*logic)->evaluate(*flatbuffers::GetRoot<wire::Candidate>(truncated.data()), {});
  REQUIRE(v.ok());
  CHECK(v->status == wire::VerdictStatus::rejected);
  CHECK_MESSAGE(v->reason.find("never closed") != std::string::npos, v->reason);
  CHECK(v->compile_ms == 0);
  const std::string bare_source = "// ``` in a comment is not a fence\n" + good_source;
  const auto bare = candidate_for(*relu, bare_source, bare_source);
  v = (*logic)->evaluate(*flatbuffers::GetRoot<wire::Candidate>(bare.data()), {});
  REQUIRE(v.ok());
  CHECK_MESSAGE(v->status == (gpu ? wire::VerdictStatus::ok : wire::VerdictStatus::compiled), v->reason);
  // An empty answer arrives without a source (the object API writes "" as no string): the
  // policy's answer, scored 0, not an infra_error the reward would leave unscored.
  const auto empty = candidate_for(*relu, "", "");
  REQUIRE(flatbuffers::GetRoot<wire::Candidate>(empty.data())->source() == nullptr);
  v = (*logic)->evaluate(*flatbuffers::GetRoot<wire::Candidate>(empty.data()), {});
  REQUIRE(v.ok());
  CHECK(v->status == wire::VerdictStatus::rejected);
  CHECK_MESSAGE(v->reason == "no kernel to judge: the answer is empty", v->reason);
  std::filesystem::remove_all(dir);
}

TEST_CASE("kforge worker --role sandbox joins a running pool from outside the manifest") {
  if (!sandbox::find_toolchain()) {
    MESSAGE("SKIP: nvcc not found");
    return;
  }
  using namespace std::chrono_literals;
  broker_rig rig;
  auto& sink = rig.sink;
  auto& broker = rig.broker;
  auto& producer = rig.producer;

  child_options co;
  co.env = {{"XDG_CACHE_HOME", (std::filesystem::temp_directory_path() / "kforge-worker-test").string()}};
  auto worker = child_process::start({KFORGE_BINARY, "worker", "--role", "sandbox", "--connect",
                                      broker->backend_endpoint(), "--threads", "1"},
                                     co);
  REQUIRE(worker.ok());

  const auto relu = builtin_task("l1/relu");
  const auto work = messages::pack({11, 42, "test", 0, 0},
                                   candidate_t(*relu, sandbox::known_good_candidate()));
  REQUIRE(producer->send(work, 5s).ok());

  std::optional<messages::envelope> got;
  const auto deadline = std::chrono::steady_clock::now() + 180s;
  while (!got && std::chrono::steady_clock::now() < deadline) {
    auto r = sink->receive(200ms);
    REQUIRE(r.ok());
    if (r->has_value()) got = std::move(**r);
  }
  const std::string output = worker->take_output();
  worker->kill();
  REQUIRE_MESSAGE(got.has_value(), "no verdict; worker output: " << output);
  CHECK((*got)->sample_id() == 42);
  const auto* v = got->as<wire::Verdict>();
  REQUIRE(v != nullptr);
  const bool gpu = sandbox::visible_gpu_count() > 0;
  CHECK_MESSAGE(v->status() == (gpu ? wire::VerdictStatus::ok : wire::VerdictStatus::compiled),
                (v->reason() ? v->reason()->str() : std::string()));
  CHECK(broker->counters().workers_alive >= 1);
  broker->stop();
}

namespace {

// A sandbox that takes its time and counts how many candidates it judges at once.
class counting_sandbox final : public actors::sandbox_logic {
 public:
  result<wire::VerdictT> evaluate(const wire::Candidate& c, const actors::envelope_info&) override {
    const int now = ++inside_;
    int seen = most_.load();
    while (now > seen && !most_.compare_exchange_weak(seen, now)) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    --inside_;
    wire::VerdictT v;
    v.candidate.reset(c.UnPack());
    v.status = wire::VerdictStatus::compiled;
    return v;
  }
  int most() const { return most_.load(); }

 private:
  std::atomic<int> inside_{0}, most_{0};
};

}  // namespace

TEST_CASE("a sandbox worker judges sandbox.compile_jobs candidates at once, each verdict once") {
  using namespace std::chrono_literals;
  broker_rig rig;
  auto& sink = rig.sink;
  auto& broker = rig.broker;
  auto& producer = rig.producer;
  const auto relu = builtin_task("l1/relu");
  REQUIRE(relu.has_value());
  constexpr std::size_t n = 6;
  for (std::uint64_t i = 0; i < n; ++i)
    REQUIRE(producer->send(messages::pack({100 + i, 200 + i, "test", 0, 0},
                                          candidate_t(*relu, "// candidate " + std::to_string(i))),
                           5s)
                .ok());

  auto logic = std::make_shared<counting_sandbox>();
  pipeline::worker_slot slot;
  slot.name = "sandbox_worker@test";
  slot.core = actors::stage_core{"sandbox_worker", slot.name};
  std::atomic<bool> stop{false};
  bus::worker_options wo;
  wo.name = slot.name;
  wo.capacity = 3;
  std::thread serving([&] { pipeline::serve_sandbox_worker(broker->backend_endpoint(), wo, logic, slot, stop); });

  std::set<std::uint64_t> samples;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (samples.size() < n && std::chrono::steady_clock::now() < deadline) {
    auto r = sink->receive(200ms);
    REQUIRE(r.ok());
    if (!r->has_value()) continue;
    CHECK(samples.insert((**r)->sample_id()).second);  // no verdict twice
    const auto* v = (*r)->as<wire::Verdict>();
    REQUIRE(v != nullptr);
    CHECK(v->worker()->str() == slot.name);
  }
  stop = true;
  serving.join();
  broker->stop();
  CHECK(samples.size() == n);
  CHECK(logic->most() == 3);  // three at once, never more
  std::lock_guard<std::mutex> g(slot.mu);
  CHECK(slot.core.snapshot(0).sent == n);
}

// Tests of the pipeline manifest: the embedded default, a multi-process topology, and one test per
// class of invalid manifest, each checking that the message names the file, the key and the reason.

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "config/manifest.hpp"
#include "tests/pipeline/one_process_topology.hpp"

using namespace kforge;
using namespace kforge::pipeline;

namespace {

std::string data(const std::string& name) {
  return std::string(KFORGE_TEST_DATA) + "/manifests/" + name;
}

const std::string& minimal = testing::one_process_topology;

bool has(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// Parses text that must be rejected and returns the message.
std::string rejected(const std::string& text) {
  auto m = parse_manifest(text, "test.toml");
  REQUIRE_MESSAGE(!m.ok(), "accepted:\n" << text);
  INFO(m.message());
  CHECK(has(m.message(), "test.toml"));
  return m.message();
}

std::string rejected_file(const std::string& name) {
  auto m = load_manifest(data(name));
  REQUIRE_MESSAGE(!m.ok(), name << " was accepted");
  INFO(m.message());
  CHECK(has(m.message(), data(name)));
  return m.message();
}

}  // namespace

TEST_CASE("the embedded default parses, validates and runs everything in one local process") {
  CHECK(has(std::string(default_manifest_text()), "[[process]]"));
  auto m = default_manifest();
  REQUIRE_MESSAGE(m.ok(), m.message());
  CHECK(m->source == "<default manifest>");
  CHECK(m->text == default_manifest_text());
  REQUIRE(m->processes.size() == 1);
  const process_spec& head = m->head();
  CHECK(head.name == "head");
  CHECK(head.head);
  CHECK(head.is_local());
  CHECK(m->find_process("head") == &head);
  for (actor_kind k : all_actor_kinds) {
    INFO(to_string(k));
    REQUIRE(m->hosts(k).size() == 1);
    CHECK(m->hosts(k).front() == &head);
    CHECK(m->count(k) >= 1);
  }
  for (const endpoint_spec& e : m->endpoints) {
    INFO(to_string(e.id));
    CHECK(e.derived);
    CHECK(e.address == "inproc://kforge." + std::string(to_string(e.id)));
  }
  CHECK(m->run.run_dir == "runs/default");
  CHECK(m->run.mode == run_mode::async);
  // The "auto" groups are what lets one default fit 1 or many GPUs (0: CPU-only groups).
  REQUIRE(m->gpu_groups.size() == 2);
  CHECK(m->gpu_groups[0].automatic);
  CHECK(m->gpu_groups[1].automatic);
  // The defaults docs/manifest.md states.
  CHECK(m->sampler.group_size == 8);
  CHECK(m->sampler.temperature == doctest::Approx(0.8));
  CHECK(m->reward.alpha == doctest::Approx(2.0));
  CHECK(m->reward.correctness_weight == doctest::Approx(0.5));
  CHECK(m->reward.speed_weight == doctest::Approx(0.5));
  CHECK(m->reward.baseline_switch_speedup == doctest::Approx(2.0));
  CHECK(m->reward.baseline_check_every == 15);
  CHECK(m->trainer.lr == doctest::Approx(5e-5));  // the demonstration's (left out: 3e-6)
  CHECK(m->trainer.kl_target_low == doctest::Approx(1e-3));
  CHECK(m->trainer.kl_target_high == doctest::Approx(5e-3));
  CHECK(m->trainer.kl_window == 100);
  CHECK(m->sandbox.trials == 30);
  CHECK(m->sandbox.slow_cutoff == doctest::Approx(20.0));
  CHECK(m->sandbox.confine);
  CHECK(m->sandbox.confirm_speedup == doctest::Approx(5.0));
  CHECK(m->sandbox.arch == "auto");  // the sandbox GPU's target, whatever GPU that is
}

TEST_CASE("a multi-process manifest with tcp and ipc endpoints parses with the right counts") {
  auto m = load_manifest(data("good_multi.toml"));
  REQUIRE_MESSAGE(m.ok(), m.message());
  CHECK(m->run.name == "multi");
  CHECK(m->run.mode == run_mode::sync);
  CHECK(m->run.steps == 50);
  CHECK(m->run.seed == 7);
  CHECK_FALSE(m->run.progress);
  CHECK(m->run.run_dir == "runs/multi");
  REQUIRE(m->processes.size() == 4);
  CHECK(m->head().name == "head");  // first process, no head = true anywhere
  CHECK(m->count(actor_kind::sampler) == 2);
  CHECK(m->count(actor_kind::sandbox_worker) == 4);
  CHECK(m->count(actor_kind::trainer) == 2);
  CHECK(m->count(actor_kind::reward) == 1);
  const process_spec* sandbox = m->find_process("sandbox");
  REQUIRE(sandbox);
  CHECK(sandbox->node == "sbx-node");
  CHECK_FALSE(sandbox->is_local());
  REQUIRE(sandbox->find(actor_kind::sandbox_worker));
  CHECK(sandbox->find(actor_kind::sandbox_worker)->gpu_group == "sandbox");
  CHECK(m->find_process("nope") == nullptr);
  REQUIRE(m->hosts(actor_kind::sampler).size() == 1);
  CHECK(m->hosts(actor_kind::sampler).front()->name == "rollout");
  CHECK(m->processes_on(link::control).size() == 4);
  CHECK(m->processes_on(link::weights).size() == 2);
  REQUIRE(m->find_gpu_group("trainer"));
  CHECK(m->find_gpu_group("trainer")->gpus == std::vector<int>{2, 3});
  CHECK(m->find_gpu_group("cpu")->gpus.empty());

  CHECK(m->endpoint(link::tasks) == "ipc:///tmp/kforge-test/tasks");
  CHECK(m->endpoint(link::batches) == "tcp://head-node:5602");
  CHECK_FALSE(m->endpoints[static_cast<int>(link::batches)].derived);
  // Left out: both ends on this host -> ipc under the run dir; both in one process -> inproc.
  CHECK(m->endpoint(link::candidates) == "ipc://runs/multi/bus/candidates");
  CHECK(m->endpoints[static_cast<int>(link::candidates)].derived);
  CHECK(m->endpoint(link::verdicts) == "inproc://kforge.verdicts");
  CHECK(m->endpoint(link::scored) == "inproc://kforge.scored");

  CHECK(m->record.links.size() == link_count);
  CHECK(m->record.max_bytes == 65536);
  CHECK(m->sampler.group_size == 4);
  CHECK(m->sampler.temperature == doctest::Approx(1.0));
  CHECK(m->sampler.top_p == doctest::Approx(1.0));  // not given: the default
  CHECK(m->sandbox.trials == 50);
}

TEST_CASE("summary() names every process, its actors, the GPU groups and the endpoints") {
  auto m = load_manifest(data("good_multi.toml"));
  REQUIRE_MESSAGE(m.ok(), m.message());
  const std::string s = m->summary();
  INFO(s);
  for (const process_spec& p : m->processes) CHECK(has(s, p.name + " ["));
  CHECK(has(s, "node sbx-node"));
  CHECK(has(s, "kforge worker --manifest FILE --process trainer"));
  CHECK(has(s, "sandbox_worker x4 on gpu group sandbox"));
  CHECK(has(s, "trainer = [2, 3]"));
  CHECK(has(s, "tcp://head-node:5602"));
  CHECK(has(s, "ipc://runs/multi/bus/candidates"));
  auto d = default_manifest();
  REQUIRE(d.ok());
  CHECK(has(d->summary(), "head [local, head]"));
  CHECK(has(d->summary(), "rollout = auto"));
}

TEST_CASE("a TOML syntax error names the file, line and column") {
  const std::string msg = rejected_file("bad_syntax.toml");
  CHECK(has(msg, data("bad_syntax.toml") + ":3:"));
  CHECK(has(msg, "TOML syntax error"));
}

TEST_CASE("a missing file is an error naming it") {
  auto m = load_manifest(data("no_such_file.toml"));
  REQUIRE_FALSE(m.ok());
  CHECK(has(m.message(), "no_such_file.toml"));
  CHECK(has(m.message(), "cannot open"));
}

TEST_CASE("an unknown key anywhere is an error, never ignored") {
  const std::string msg = rejected_file("bad_unknown_key.toml");
  CHECK(has(msg, "bad_unknown_key.toml:13:1: sampler.temprature: unknown key"));
  CHECK(has(msg, "temperature"));  // the known keys are listed, so the typo is easy to spot

  CHECK(has(rejected(minimal + "[samplr]\n"), "samplr: unknown key"));
  CHECK(has(rejected(minimal + "[run]\nnaem = \"x\"\n"), "run.naem: unknown key"));
  CHECK(has(rejected(R"([[process]]
name = "all"
nodes = "x"
[process.actors]
task_generator = {}
)"),
            "process[0].nodes: unknown key"));
  CHECK(has(rejected(R"([[process]]
name = "all"
[process.actors]
sampler = { cout = 2 }
)"),
            "process[0].actors.sampler.cout: unknown key"));
  CHECK(has(rejected(R"([[process]]
name = "all"
[process.actors]
load_generator = {}
)"),
            "process[0].actors.load_generator: unknown actor kind"));
  CHECK(has(rejected(minimal + "[endpoints]\ntask = \"inproc://t\"\n"),
            "endpoints.task: unknown link"));
  CHECK(has(rejected(minimal + "[record]\nlinks = [\"verdict\"]\n"), "record.links: unknown link"));
  CHECK(has(rejected(minimal + "[gpu_groups]\nx = []\n[trainer]\nkl_band = [0.1, 0.2]\n"),
            "trainer.kl_band: unknown key"));
}

TEST_CASE("a wrong type names the key, the expected and the actual type") {
  const std::string msg = rejected_file("bad_wrong_type.toml");
  CHECK(has(msg, "bad_wrong_type.toml:2:9: run.steps: expected an integer, got a string"));

  CHECK(has(rejected(minimal + "[run]\nprogress = \"yes\"\n"),
            "run.progress: expected a boolean"));
  CHECK(has(rejected(minimal + "[sampler]\ngroup_size = 8.0\n"),
            "sampler.group_size: expected an integer, got a float"));
  CHECK(has(rejected(minimal + "[reward]\nalpha = \"2\"\n"), "reward.alpha: expected a number"));
  CHECK(has(rejected(minimal + "[gpu_groups]\nrollout = 0\n"),
            "gpu_groups.rollout: expected an array of GPU indices"));
  CHECK(has(rejected(minimal + "[endpoints]\ntasks = 5555\n"),
            "endpoints.tasks: expected a string"));
  CHECK(has(rejected("[process]\nname = \"x\"\n"), "process: expected an array of tables"));
  CHECK(has(rejected(R"([[process]]
name = "all"
[process.actors]
sampler = 2
)"),
            "process[0].actors.sampler: expected a table"));
  CHECK(has(rejected(minimal + "[sampler]\nbackend = \"vllm\"\n"),
            "sampler.backend: must be one of \"engine\", \"openai\", got \"vllm\""));
  CHECK(has(rejected(minimal + "[run]\nmode = \"fast\"\n"), "run.mode: must be one of"));
}

TEST_CASE("counts and sizes have an upper bound: the error names the key, the value and the bound") {
  // Far past any real setting; without a bound each would abort the run on allocation.
  const std::pair<std::string, std::string> too_big[] = {
      {"[sampler]\ngroup_size = 100000000\n", "sampler.group_size: must be in [2, 1024], got 100000000"},
      {"[sampler]\nmax_new_tokens = 2000000000\n",
       "sampler.max_new_tokens: must be in [1, 131072], got 2000000000"},
      {"[sampler]\nbatch_requests = 5000\n", "sampler.batch_requests: must be in [1, 1024], got 5000"},
      {"[tasks]\nwindow = 10000000000\n", "tasks.window: must be in [1, 65536], got 10000000000"},
      {"[buffer]\ngroups_per_batch = 4097\n", "buffer.groups_per_batch: must be in [1, 4096], got 4097"},
      {"[trainer]\nmicro_batch = 1000000\n", "trainer.micro_batch: must be in [1, 4096], got 1000000"},
      {"[trainer]\nkl_window = 4000000000\n", "trainer.kl_window: must be in [1, 1048576], got 4000000000"},
      {"[sandbox]\nrunners_per_gpu = 65\n", "sandbox.runners_per_gpu: must be in [1, 64], got 65"},
      {"[sandbox]\ncompile_jobs = 100000\n", "sandbox.compile_jobs: must be in [1, 256], got 100000"},
      {"[sandbox]\ntrials = 1000000000\n", "sandbox.trials: must be in [30, 100000], got 1000000000"},
  };
  for (const auto& [table, message] : too_big) {
    CAPTURE(table);
    CHECK(has(rejected(minimal + table), message));
  }
  std::string many_samplers = minimal;
  many_samplers.replace(many_samplers.find("sampler = {}"), 12, "sampler = { count = 100000 }");
  CHECK(has(rejected(many_samplers), "process[0].actors.sampler.count: must be in [1, 256], got 100000"));
  // The bound itself is accepted.
  auto at_bound = parse_manifest(minimal + "[sampler]\ngroup_size = 1024\nbatch_requests = 1024\n", "t.toml");
  CHECK_MESSAGE(at_bound.ok(), at_bound.message());
}

TEST_CASE("out-of-range values name the key, the bound and the value") {
  const std::string msg = rejected_file("bad_range.toml");
  // All three problems are reported at once, each with its position.
  CHECK(has(msg, "bad_range.toml:7:28: process[0].actors.sandbox_worker.count: must be in [1, 256], got -2"));
  CHECK(has(msg, "sampler.group_size: must be in [2, 1024], got 1"));
  CHECK(has(msg, "sampler.temperature: must be > 0, got 0"));

  CHECK(has(rejected(minimal + "[sampler]\ntop_p = 1.5\n"), "sampler.top_p: must be in (0, 1]"));
  CHECK(has(rejected(minimal + "[sampler]\nmax_new_tokens = 0\n"), "sampler.max_new_tokens"));
  CHECK(has(rejected(minimal + "[sampler]\nbatch_requests = 0\n"), "sampler.batch_requests"));
  CHECK(has(rejected(minimal + "[trainer]\nlr = -1e-6\n"), "trainer.lr: must be > 0"));
  CHECK(has(rejected(minimal + "[trainer]\nkl_step = 1.0\n"), "trainer.kl_step: must be > 1"));
  CHECK(has(rejected(minimal + "[trainer]\nkl_target_low = 0.01\n"),
            "trainer.kl_target_low: the KL target band is empty"));
  CHECK(has(rejected(minimal + "[trainer]\nclip_eps_low = 1.0\n"),
            "trainer.clip_eps_low: must be in (0, 1)"));
  CHECK(has(rejected(minimal + "[trainer]\nranks = \"nodes\"\n"), "trainer.ranks"));
  CHECK(has(rejected(minimal + "[trainer]\ngroup_baseline = \"mean\"\n"),
            "trainer.group_baseline: must be one of \"kept\", \"draws\", got \"mean\""));
  CHECK(has(rejected(minimal + "[trainer]\nremote_ranks = 1\nrank_endpoint = \"tcp://10.0.0.1:29500\"\n"),
            "trainer.remote_ranks: ranks on other hosts are processes"));
  CHECK(has(rejected(minimal + "[trainer]\nranks = \"processes\"\nremote_ranks = 1\n"),
            "trainer.remote_ranks: needs trainer.rank_endpoint"));
  CHECK(has(rejected(minimal + "[trainer]\nrank_endpoint = \"ipc:///tmp/x.sock\"\n"),
            "trainer.rank_endpoint: must be tcp://HOST:PORT"));
  CHECK(has(rejected(minimal + "[trainer]\nrank_endpoint = \"tcp://*:29500\"\n"), "not a wildcard"));
  CHECK(has(rejected(minimal + "[trainer]\noverlap_grad_reduce = 1\n"), "trainer.overlap_grad_reduce"));
  {
    auto off = parse_manifest(minimal + "[trainer]\noverlap_grad_reduce = false\n", "t.toml");
    REQUIRE_MESSAGE(off.ok(), off.message());
    CHECK_FALSE(off->trainer.overlap_grad_reduce);
    CHECK(default_manifest()->trainer.overlap_grad_reduce);
  }
  CHECK(has(rejected(minimal + "[sandbox]\ntrials = 10\n"), "sandbox.trials: must be in [30, 100000], got 10"));
  CHECK(has(rejected(minimal + "[sandbox]\nslow_cutoff = -1.0\n"), "sandbox.slow_cutoff: must be >= 0"));
  {
    auto off = parse_manifest(minimal + "[sandbox]\nslow_cutoff = 0.0\n", "t.toml");
    REQUIRE_MESSAGE(off.ok(), off.message());
    CHECK(off->sandbox.slow_cutoff == 0.0);
  }
  CHECK(has(rejected(minimal + "[sandbox]\ntimeout_s = 0\n"), "sandbox.timeout_s: must be > 0"));
  CHECK(has(rejected(minimal + "[sandbox]\nconfirm_speedup = -1.0\n"), "sandbox.confirm_speedup: must be >= 0"));
  {
    auto open = parse_manifest(minimal + "[sandbox]\nconfine = false\n", "t.toml");
    REQUIRE_MESSAGE(open.ok(), open.message());
    CHECK_FALSE(open->sandbox.confine);
  }
  CHECK(has(rejected(minimal + "[sandbox]\nreuse_verdicts = \"run\"\n"), "sandbox.reuse_verdicts"));
  // arch: "auto" or one nvcc target; nvcc's multi-target names and extra flags are not one target.
  CHECK(parse_manifest(minimal, "t.toml")->sandbox.arch == "auto");
  for (const char* arch : {"sm_80", "sm_89", "sm_90a", "sm_100a", "sm_120"}) {
    auto set = parse_manifest(minimal + "[sandbox]\narch = \"" + arch + "\"\n", "t.toml");
    REQUIRE_MESSAGE(set.ok(), set.message());
    CHECK(set->sandbox.arch == arch);
  }
  for (const char* arch : {"native", "all-major", "sm_90a -G", "90", ""})
    CHECK(has(rejected(minimal + "[sandbox]\narch = \"" + arch + "\"\n"),
              "sandbox.arch: expected \"auto\" (the sandbox GPU's architecture) or one nvcc target such as "
              "\"sm_80\", \"sm_89\", \"sm_90a\", \"sm_100a\", got \"" + std::string(arch) + "\""));
  {
    auto task = parse_manifest(minimal + "[sandbox]\nreuse_verdicts = \"task\"\n", "t.toml");
    REQUIRE_MESSAGE(task.ok(), task.message());
    CHECK(task->sandbox.reuse_verdicts == verdict_reuse_scope::task);
    auto off = parse_manifest(minimal + "[sandbox]\nreuse_verdicts = \"off\"\n", "t.toml");
    REQUIRE_MESSAGE(off.ok(), off.message());
    CHECK(off->sandbox.reuse_verdicts == verdict_reuse_scope::off);
  }
  CHECK(has(rejected(minimal + "[buffer]\nmax_staleness = -1\n"), "buffer.max_staleness"));
  CHECK(has(rejected(minimal + "[buffer]\ngroups_per_batch = 0\n"), "buffer.groups_per_batch"));
  CHECK(has(rejected(minimal + "[buffer]\ndedup = \"prompt\"\n"), "buffer.dedup"));
  {
    auto off = parse_manifest(minimal + "[buffer]\ndedup = \"off\"\n", "t.toml");
    REQUIRE_MESSAGE(off.ok(), off.message());
    CHECK(off->buffer.dedup == dedup_scope::off);
    CHECK(dedup_left_out_note(*off).empty());
    const auto left_out = parse_manifest(minimal, "old-run/manifest.toml");
    REQUIRE(left_out.ok());
    CHECK(has(dedup_left_out_note(*left_out), "old-run/manifest.toml sets no [buffer] dedup"));
  }
  CHECK(has(rejected(minimal + "[reward]\ncorrectness_weight = 0\nspeed_weight = 0\n"),
            "both 0"));
  CHECK(has(rejected(minimal + "[reward]\nbaseline_switch_speedup = 0.5\n"),
            "reward.baseline_switch_speedup: must be >= 1"));
  CHECK(has(rejected(minimal + "[run]\nsteps = 0\n"), "run.steps: must be >= 1, got 0"));
  CHECK(has(rejected(minimal + "[run]\nseed = -3\n"), "run.seed: must be >= 0"));
  CHECK(has(rejected(minimal + "[run]\nstall_timeout_s = 0\n"), "run.stall_timeout_s: must be > 0"));
  {
    auto slow = parse_manifest(minimal + "[run]\nstall_timeout_s = 900.0\n", "test.toml");
    REQUIRE_MESSAGE(slow.ok(), slow.message());
    CHECK(slow->run.stall_timeout_s == 900.0);
    CHECK(parse_manifest(minimal, "test.toml")->run.stall_timeout_s == 20.0);
  }
  CHECK(has(rejected(minimal + "[run]\ntime_limit_s = -1\n"), "run.time_limit_s: must be >= 0"));
  {
    auto bounded = parse_manifest(minimal + "[run]\ntime_limit_s = 840\n", "test.toml");
    REQUIRE_MESSAGE(bounded.ok(), bounded.message());
    CHECK(bounded->run.time_limit_s == 840.0);
    CHECK(parse_manifest(minimal, "test.toml")->run.time_limit_s == 0.0);  // no limit
  }
  {
    auto gpu_only = parse_manifest(minimal + "[sampler]\nrequire_gpu = true\n", "test.toml");
    REQUIRE_MESSAGE(gpu_only.ok(), gpu_only.message());
    CHECK(gpu_only->sampler.require_gpu);
    CHECK_FALSE(parse_manifest(minimal, "test.toml")->sampler.require_gpu);
    CHECK(has(rejected(minimal + "[sampler]\nrequire_gpu = \"yes\"\n"), "sampler.require_gpu"));
  }
  CHECK(has(rejected(minimal + "[run]\nname = \"a b\"\n"), "run.name: must be non-empty"));
  CHECK(has(rejected(minimal + "[record]\nmax_bytes = 0\n"), "record.max_bytes"));
  CHECK(has(rejected(minimal + "[gpu_groups]\ng = [-1]\n"),
            "gpu_groups.g: GPU indices must be integers >= 0"));
  CHECK(has(rejected(minimal + "[sampler]\nbackend = \"openai\"\n"),
            "sampler.server_url: missing: backend \"openai\" needs"));
}

TEST_CASE("a GPU in two groups names both groups and the GPU") {
  const std::string msg = rejected_file("bad_gpu_two_groups.toml");
  CHECK(has(msg, "bad_gpu_two_groups.toml:3:"));
  CHECK(has(msg, "gpu_groups.trainer: GPU 1 is in two groups, \"rollout\" and \"trainer\""));
  CHECK(has(rejected(minimal + "[gpu_groups]\ng = [0, 0]\n"), "GPU 0 is listed twice"));
}

TEST_CASE("an actor naming an unknown GPU group is an error") {
  const std::string msg = rejected_file("bad_unknown_group.toml");
  CHECK(has(msg, "process[0].actors.sampler.gpu_group: unknown GPU group \"rolout\""));
  CHECK(has(msg, "known: \"rollout\""));
  // CPU stages take no GPU group: giving one is a mistake, not a hint.
  CHECK(has(rejected(R"([gpu_groups]
g = [0]
[[process]]
name = "all"
[process.actors]
reward = { gpu_group = "g" }
)"),
            "process[0].actors.reward.gpu_group: a reward runs on the CPU"));
  // NCCL: one GPU per trainer rank.
  CHECK(has(rejected(R"([gpu_groups]
t = [0]
[[process]]
name = "all"
[process.actors]
task_generator = {}
sampler = {}
sandbox_pool = {}
sandbox_worker = {}
reward = {}
buffer = {}
trainer = { count = 2, gpu_group = "t" }
)"),
            "process[0].actors.trainer.count: 2 trainer ranks but group \"t\" has 1 GPU(s)"));
}

TEST_CASE("two links on one endpoint are a clash") {
  const std::string msg = rejected_file("bad_endpoint_clash.toml");
  CHECK(has(msg, "endpoints.verdicts: endpoint clash"));
  CHECK(has(msg, "link \"tasks\""));
  CHECK(has(rejected(minimal + "[endpoints]\nscored = \"inproc://x\"\nbatches = \"inproc://x\"\n"),
            "endpoints.batches: endpoint clash: \"inproc://x\" is also used by link \"scored\""));
  // A derived endpoint counts too.
  CHECK(has(rejected(minimal + "[endpoints]\nweights = \"inproc://kforge.tasks\"\n"),
            "endpoints.weights: endpoint clash"));
  // Different ports, or different hosts on one port, do not clash.
  auto ok = parse_manifest(minimal + "[endpoints]\ntasks = \"tcp://a:5000\"\nscored = "
                                     "\"tcp://b:5000\"\nbatches = \"tcp://a:5001\"\n",
                           "test.toml");
  CHECK_MESSAGE(ok.ok(), ok.message());
}

TEST_CASE("inproc across processes, ipc across nodes and missing cross-node endpoints are errors") {
  const std::string msg = rejected_file("bad_inproc_across.toml");
  CHECK(has(msg, "bad_inproc_across.toml:17:9: endpoints.tasks: inproc:// only works inside one "
                 "process"));
  CHECK(has(msg, "\"head\" (local), \"rollout\" (local)"));

  const std::string two_nodes = R"(
[[process]]
name = "head"
[process.actors]
task_generator = {}
sandbox_pool = {}
sandbox_worker = {}
reward = {}
buffer = {}
trainer = {}
[[process]]
name = "far"
node = "node-b"
[process.actors]
sampler = {}
)";
  CHECK(has(rejected(two_nodes + "[endpoints]\ntasks = \"ipc://t\"\n"),
            "endpoints.tasks: ipc:// only reaches processes on one host"));
  CHECK(has(rejected(two_nodes), "endpoints.tasks: missing: this link joins processes on "
                                 "different nodes"));
  CHECK(has(rejected(two_nodes + R"([endpoints]
tasks = "tcp://*:5601"
candidates = "tcp://head:5602"
weights = "tcp://head:5603"
control = "tcp://head:5604"
metrics = "tcp://head:5605"
)"),
            "endpoints.tasks: tcp://*:PORT cannot be connected to"));
  auto ok = parse_manifest(two_nodes + R"([endpoints]
tasks = "tcp://head:5601"
candidates = "tcp://head:5602"
weights = "tcp://head:5603"
control = "tcp://head:5604"
metrics = "tcp://head:5605"
)",
                           "test.toml");
  CHECK_MESSAGE(ok.ok(), ok.message());
}

TEST_CASE("a malformed endpoint names the link and what is wrong") {
  const std::string msg = rejected_file("bad_endpoint_malformed.toml");
  CHECK(has(msg, "endpoints.tasks: malformed endpoint \"udp://host:5000\": unknown transport"));
  CHECK(has(msg, "endpoints.scored: malformed endpoint \"tcp://host\": tcp needs HOST:PORT"));
  CHECK(has(rejected(minimal + "[endpoints]\ntasks = \"ipc://\"\n"), "address after \"://\" is empty"));
  CHECK(has(rejected(minimal + "[endpoints]\ntasks = \"tcp://h:*\"\n"), "fixed port"));
  CHECK(has(rejected(minimal + "[endpoints]\ntasks = \"tcp://h:70000\"\n"), "1..65535"));
  CHECK(has(rejected(minimal + "[endpoints]\ntasks = \"localhost:5000\"\n"),
            "expected inproc://NAME"));
  CHECK(has(rejected(minimal + "[endpoints]\ntasks = \"ipc://" + std::string(120, 'x') + "\"\n"),
            "a Unix socket path holds at most 107"));
}

TEST_CASE("every stage must be hosted, and the singleton stages exactly once") {
  const std::string msg = rejected_file("bad_missing_stage.toml");
  CHECK(has(msg, "process: missing stage: no process hosts a trainer"));
  CHECK(has(rejected("[run]\nname = \"x\"\n"), "process: missing: the manifest names no process"));
  CHECK(has(rejected(R"([[process]]
name = "all"
)"),
            "process[0].actors: missing"));
  CHECK(has(rejected(minimal + R"([[process]]
name = "extra"
[process.actors]
buffer = {}
)"),
            "process[1].actors.buffer: a second buffer (also in process \"all\")"));
  const std::string two_pools = R"([[process]]
name = "all"
[process.actors]
task_generator = {}
sampler = {}
sandbox_pool = { count = 2 }
sandbox_worker = {}
reward = {}
buffer = {}
trainer = {}
)";
  CHECK(has(rejected(two_pools), "process[0].actors.sandbox_pool.count: must be 1"));
}

TEST_CASE("process names are unique and there is exactly one local head") {
  const std::string msg = rejected_file("bad_duplicate_process.toml");
  CHECK(has(msg, "bad_duplicate_process.toml:16:8: process[2].name: duplicate process name "
                 "\"worker\" (also process[1])"));
  CHECK(has(rejected(R"([[process]]
node = "x"
[process.actors]
task_generator = {}
)"),
            "process[0].name: missing"));
  const std::string two = R"(
[[process]]
name = "a"
head = true
[process.actors]
task_generator = {}
sampler = {}
sandbox_pool = {}
sandbox_worker = {}
[[process]]
name = "b"
)";
  CHECK(has(rejected(two + "head = true\n[process.actors]\nreward = {}\nbuffer = {}\ntrainer = {}\n"),
            "process[1].head: head = true on more than one process"));
  auto second_head = parse_manifest(
      two + "[process.actors]\nreward = {}\nbuffer = {}\ntrainer = {}\n", "test.toml");
  REQUIRE_MESSAGE(second_head.ok(), second_head.message());
  CHECK(second_head->head().name == "a");
  CHECK_FALSE(second_head->find_process("b")->head);
  CHECK(has(rejected(R"([[process]]
name = "all"
node = "elsewhere"
[process.actors]
task_generator = {}
sampler = {}
sandbox_pool = {}
sandbox_worker = {}
reward = {}
buffer = {}
trainer = {}
)"),
            "process[0].node: the head process runs where `kforge run` is started"));
}

TEST_CASE("resolve_gpu_groups shares visible GPUs out among auto groups") {
  auto d = default_manifest();
  REQUIRE(d.ok());
  auto none = resolve_gpu_groups(*d, 0);
  REQUIRE(none.ok());
  CHECK(none->at("rollout").empty());
  CHECK(none->at("trainer").empty());
  auto one = resolve_gpu_groups(*d, 1);
  REQUIRE(one.ok());
  CHECK(one->at("rollout") == std::vector<int>{0});
  CHECK(one->at("trainer") == std::vector<int>{0});  // one GPU: both groups share it
  auto three = resolve_gpu_groups(*d, 3);
  REQUIRE(three.ok());
  CHECK(three->at("rollout") == std::vector<int>{0, 1});
  CHECK(three->at("trainer") == std::vector<int>{2});

  auto mixed = parse_manifest(minimal + "[gpu_groups]\nsandbox = [0]\nrest = \"auto\"\n", "t.toml");
  REQUIRE_MESSAGE(mixed.ok(), mixed.message());
  auto r = resolve_gpu_groups(*mixed, 4);
  REQUIRE(r.ok());
  CHECK(r->at("sandbox") == std::vector<int>{0});
  CHECK(r->at("rest") == std::vector<int>{1, 2, 3});
  auto missing = resolve_gpu_groups(*mixed, 0);
  REQUIRE_FALSE(missing.ok());
  CHECK(has(missing.message(), "gpu_groups.sandbox: GPU 0 is not visible"));
}

TEST_CASE("GPU groups keep file order, which decides how auto groups share GPUs out") {
  auto m = parse_manifest(minimal + "[gpu_groups]\nzeta = \"auto\"\nalpha = \"auto\"\n", "t.toml");
  REQUIRE_MESSAGE(m.ok(), m.message());
  REQUIRE(m->gpu_groups.size() == 2);
  CHECK(m->gpu_groups[0].name == "zeta");
  auto r = resolve_gpu_groups(*m, 3);
  REQUIRE(r.ok());
  CHECK(r->at("zeta") == std::vector<int>{0, 1});
  CHECK(r->at("alpha") == std::vector<int>{2});
}

TEST_CASE("[tasks]: defaults, every key read, and the feedback link derived like the others") {
  auto d = default_manifest();
  REQUIRE_MESSAGE(d.ok(), d.message());
  CHECK(d->tasks.source == task_source_kind::files);  // the shipped model's train split + unseen
  CHECK(d->tasks.files == std::vector<std::string>{"models/kforge-tiny/train_tasks.jsonl",
                                                   "models/kforge-tiny/rl_tasks.jsonl"});
  CHECK(d->tasks.sampling == task_sampling::curriculum);
  CHECK(d->tasks.window == 32);
  CHECK(d->tasks.floor == doctest::Approx(0.02));
  CHECK(d->tasks.unseen_bonus == doctest::Approx(0.25));
  CHECK(d->tasks.prompt_template.empty());
  CHECK(d->tasks.gpu.name.empty());  // unknown unless [tasks.gpu] says
  CHECK(d->endpoint(link::feedback) == "inproc://kforge.feedback");
  CHECK(link_from_string("feedback") == link::feedback);
  CHECK(info(link::feedback).from == actor_kind::reward);
  CHECK(info(link::feedback).to == actor_kind::task_generator);

  auto m = parse_manifest(minimal + R"([tasks]
source = "stand-in"
files = ["a.jsonl", "dir/b.json"]
sampling = "uniform"
window = 8
floor = 0
unseen_bonus = 1
prompt_template = "my_prompt.txt"
[tasks.gpu]
name = "NVIDIA H200"
compute_capability = "9.0"
sm_count = 132
shared_per_block = 49152
shared_per_block_optin = 232448
shared_per_sm = 233472
registers_per_sm = 65536
l2_bytes = 62914560
memory_bytes = 150754820096
memory_bandwidth_gbs = 4800
)",
                          "test.toml");
  REQUIRE_MESSAGE(m.ok(), m.message());
  CHECK(m->tasks.source == task_source_kind::stand_in);
  CHECK(m->tasks.files == std::vector<std::string>{"a.jsonl", "dir/b.json"});
  CHECK(m->tasks.sampling == task_sampling::uniform);
  CHECK(m->tasks.window == 8);
  CHECK(m->tasks.floor == 0);
  CHECK(m->tasks.unseen_bonus == doctest::Approx(1.0));
  CHECK(m->tasks.prompt_template == "my_prompt.txt");
  CHECK(m->tasks.gpu.name == "NVIDIA H200");
  CHECK(m->tasks.gpu.major == 9);
  CHECK(m->tasks.gpu.minor == 0);
  CHECK(m->tasks.gpu.sm_count == 132);
  CHECK(m->tasks.gpu.shared_per_block == 49152);
  CHECK(m->tasks.gpu.shared_per_block_optin == 232448);
  CHECK(m->tasks.gpu.shared_per_sm == 233472);
  CHECK(m->tasks.gpu.registers_per_sm == 65536);
  CHECK(m->tasks.gpu.l2_bytes == 62914560);
  CHECK(m->tasks.gpu.memory_bytes == 150754820096);
  CHECK(m->tasks.gpu.memory_bandwidth_gbs == doctest::Approx(4800.0));

  // The reward and the task generator in two processes on one host: ipc under the run dir.
  auto split = parse_manifest(R"([[process]]
name = "a"
[process.actors]
task_generator = {}
sampler = {}
sandbox_pool = {}
sandbox_worker = {}
buffer = {}
trainer = {}
[[process]]
name = "b"
[process.actors]
reward = {}
)",
                              "test.toml");
  REQUIRE_MESSAGE(split.ok(), split.message());
  CHECK(split->endpoint(link::feedback) == "ipc://runs/default/bus/feedback");
  CHECK(split->processes_on(link::feedback).size() == 2);
}

TEST_CASE("[tasks]: each bad value is an error naming the key and its position") {
  const auto bad = [](const std::string& table) { return rejected(minimal + "[tasks]\n" + table); };
  CHECK(has(bad("source = \"library\"\n"),
            "test.toml:13:10: tasks.source: must be one of \"builtin\", \"files\", \"stand-in\", got "
            "\"library\""));
  CHECK(has(bad("files = \"a.jsonl\"\n"), "tasks.files: expected an array of task file paths"));
  CHECK(has(bad("source = \"files\"\n"), "tasks.files: must name at least one task file"));
  CHECK_FALSE(has(bad("source = \"files\"\nfiles = \"a.jsonl\"\n"), "must name at least one"));  // one error, not two
  CHECK(has(bad("files = [\"a.jsonl\", 3]\n"), "tasks.files[1]: expected a file path"));
  CHECK(has(bad("files = [\"\"]\n"), "tasks.files[0]: must not be empty"));
  CHECK(has(bad("sampling = \"pass_rate\"\n"),
            "tasks.sampling: must be one of \"curriculum\", \"uniform\", got \"pass_rate\""));
  CHECK(has(bad("window = 0\n"), "tasks.window: must be in [1, 65536], got 0"));
  CHECK(has(bad("window = 2.5\n"), "tasks.window: expected an integer"));
  CHECK(has(bad("floor = -0.1\n"), "tasks.floor: must be >= 0"));
  CHECK(has(bad("unseen_bonus = \"high\"\n"), "tasks.unseen_bonus: expected a number"));
  CHECK(has(bad("prompt_template = 1\n"), "tasks.prompt_template: expected a string"));
  CHECK(has(bad("curriculum = \"uniform\"\n"), "tasks.curriculum: unknown key"));
  CHECK(has(bad("gpu = 1\n"), "tasks.gpu: expected a table"));
  CHECK(has(bad("[tasks.gpu]\nsm = 132\n"), "tasks.gpu.sm: unknown key"));
  CHECK(has(bad("[tasks.gpu]\ncompute_capability = \"sm_90\"\n"),
            "tasks.gpu.compute_capability: expected MAJOR.MINOR such as \"9.0\", got \"sm_90\""));
  CHECK(has(bad("[tasks.gpu]\ncompute_capability = 9.0\n"),
            "tasks.gpu.compute_capability: expected a string"));
  CHECK(has(bad("[tasks.gpu]\nsm_count = 0\n"), "tasks.gpu.sm_count: must be >= 1, got 0"));
  CHECK(has(bad("[tasks.gpu]\nname = \"\"\n"), "tasks.gpu.name: must not be empty"));
  CHECK(has(bad("[tasks.gpu]\nmemory_bandwidth_gbs = 0\n"),
            "tasks.gpu.memory_bandwidth_gbs: must be > 0"));
  CHECK(has(rejected(minimal + "[endpoints]\nfeedback = 5\n"),
            "endpoints.feedback: expected a string"));
  // Every problem of the table at once.
  const std::string all = bad("source = \"x\"\nwindow = 0\n");
  CHECK(has(all, "tasks.source"));
  CHECK(has(all, "tasks.window"));
}

TEST_CASE("[trainer] lora and activation_checkpointing: off by default, read inline or as a table, checked") {
  auto plain = parse_manifest(minimal, "test.toml");
  REQUIRE_MESSAGE(plain.ok(), plain.message());
  CHECK_FALSE(plain->trainer.lora.enabled);
  CHECK_FALSE(plain->trainer.activation_checkpointing);

  auto inline_table = parse_manifest(minimal + "[trainer]\nactivation_checkpointing = true\n"
                                               "lora = { rank = 64, alpha = 128, dropout = 0.05, "
                                               "targets = [\"q_proj\", \"down_proj\"] }\n",
                                     "test.toml");
  REQUIRE_MESSAGE(inline_table.ok(), inline_table.message());
  const auto& l = inline_table->trainer.lora;
  CHECK(l.enabled);
  CHECK(l.rank == 64);
  CHECK(l.alpha == 128);
  CHECK(l.dropout == doctest::Approx(0.05));
  CHECK(l.targets == std::vector<std::string>{"q_proj", "down_proj"});
  CHECK(inline_table->trainer.activation_checkpointing);

  auto defaults = parse_manifest(minimal + "[trainer.lora]\n", "test.toml");  // the table alone turns it on
  REQUIRE_MESSAGE(defaults.ok(), defaults.message());
  CHECK(defaults->trainer.lora.enabled);
  CHECK(defaults->trainer.lora.rank == 16);
  CHECK(defaults->trainer.lora.targets == std::vector<std::string>{"q_proj", "k_proj", "v_proj", "o_proj"});

  const auto bad = [](const std::string& lora) { return rejected(minimal + "[trainer.lora]\n" + lora); };
  CHECK(has(bad("rank = 0\n"), "trainer.lora.rank: must be in [1, 4096], got 0"));
  CHECK(has(bad("alpha = 0\n"), "trainer.lora.alpha: must be > 0"));
  CHECK(has(bad("dropout = 1.0\n"), "trainer.lora.dropout"));
  CHECK(has(bad("targets = [\"q_proj\", \"lm_head\"]\n"), "trainer.lora.targets[1]: expected one of \"q_proj\""));
  CHECK(has(bad("targets = [\"q_proj\", \"q_proj\"]\n"), "trainer.lora.targets[1]: \"q_proj\" named twice"));
  CHECK(has(bad("targets = []\n"), "trainer.lora.targets: must name at least one of \"q_proj\""));
  CHECK(has(bad("targets = \"q_proj\"\n"), "trainer.lora.targets: expected an array"));
  CHECK(has(bad("r = 8\n"), "trainer.lora.r: unknown key"));
  CHECK(has(rejected(minimal + "[trainer]\nlora = true\n"), "trainer.lora: expected a table"));
  CHECK(has(rejected(minimal + "[trainer]\nactivation_checkpointing = 1\n"),
            "trainer.activation_checkpointing: expected a boolean"));
}

TEST_CASE("[sampler.server]: servers the openai backend starts, with {port} in their command") {
  const std::string openai = minimal + "[sampler]\nbackend = \"openai\"\n";
  auto m = parse_manifest(openai + "[sampler.server]\ncommand = \"vllm serve /m --port {port}\"\nport = 9000\n"
                                   "count = 2\nready_timeout_s = 60\n",
                          "test.toml");
  REQUIRE_MESSAGE(m.ok(), m.message());  // no server_url needed: the servers give theirs
  const auto& s = m->sampler.server;
  CHECK(s.enabled);
  CHECK(s.command == "vllm serve /m --port {port}");
  CHECK(s.port == 9000);
  CHECK(s.count == 2);
  CHECK(s.ready_timeout_s == 60);
  CHECK_FALSE(parse_manifest(minimal, "test.toml")->sampler.server.enabled);

  const auto bad = [&](const std::string& server) { return rejected(openai + "[sampler.server]\n" + server); };
  CHECK(has(bad("port = 9000\n"), "sampler.server.command: missing: the command line that starts one server"));
  CHECK(has(bad("command = \"vllm serve /m\"\n"), "sampler.server.command: must contain {port}"));
  CHECK(has(bad("command = \"x {port}\"\nport = 0\n"), "sampler.server.port: must be in [1, 65535]"));
  CHECK(has(bad("command = \"x {port}\"\nready_timeout_s = 0\n"), "sampler.server.ready_timeout_s: must be > 0"));
  CHECK(has(bad("command = \"x {port}\"\ngpus = 2\n"), "sampler.server.gpus: unknown key"));
  CHECK(has(rejected(minimal + "[sampler.server]\ncommand = \"x {port}\"\n"),
            "sampler.server: starts inference servers for backend = \"openai\""));
}

TEST_CASE("[trainer] shard_optimizer: off by default, for full fine-tuning only") {
  auto plain = parse_manifest(minimal, "test.toml");
  REQUIRE_MESSAGE(plain.ok(), plain.message());
  CHECK_FALSE(plain->trainer.shard_optimizer);
  auto on = parse_manifest(minimal + "[trainer]\nshard_optimizer = true\n", "test.toml");
  REQUIRE_MESSAGE(on.ok(), on.message());
  CHECK(on->trainer.shard_optimizer);
  CHECK(has(rejected(minimal + "[trainer]\nshard_optimizer = true\nlora = { rank = 8 }\n"),
            "trainer.shard_optimizer: shards full fine-tuning's optimiser state; with trainer.lora"));
  // Off with LoRA is fine.
  CHECK(parse_manifest(minimal + "[trainer]\nshard_optimizer = false\nlora = { rank = 8 }\n", "test.toml").ok());
}

TEST_CASE("[agent] reward: each episode reward by its name; an unknown one names the known") {
  for (auto k : {episode_reward_kind::best, episode_reward_kind::last, episode_reward_kind::discounted,
                 episode_reward_kind::turn_returns}) {
    auto m = parse_manifest(minimal + "[agent]\nmax_turns = 3\nreward = \"" + episode_reward_name(k) + "\"\n", "test.toml");
    REQUIRE_MESSAGE(m.ok(), m.message());
    CHECK(m->agent.reward == k);
  }
  CHECK(has(rejected(minimal + "[agent]\nreward = \"mean\"\n"),
            "agent.reward: must be one of \"best\", \"last\", \"discounted\", \"turn_returns\", got \"mean\""));
}

TEST_CASE("the manifests in deploy/manifests parse and validate (the loops' @MODEL@ filled in)") {
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(KFORGE_SOURCE_DIR) / "deploy/manifests")) {
    if (e.path().extension() != ".toml") continue;
    INFO(e.path().string());
    std::ifstream f(e.path());
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    for (auto at = text.find("@MODEL@"); at != std::string::npos; at = text.find("@MODEL@"))
      text.replace(at, 7, "/models/random-qwen");
    auto m = parse_manifest(text, e.path().filename().string());
    CHECK_MESSAGE(m.ok(), (m.ok() ? "" : m.message()));
  }
}

TEST_CASE("the embedded default is the demonstration: the shipped model, RL on its train split and unseen tasks, within 15 minutes") {
  auto m = default_manifest();
  REQUIRE_MESSAGE(m.ok(), m.message());
  // Paths relative to the repository root, where the README runs it.
  const std::filesystem::path root(KFORGE_SOURCE_DIR);
  CHECK(m->sampler.model == "models/kforge-tiny");
  CHECK(std::filesystem::exists(root / m->sampler.model / "config.json"));
  CHECK(std::filesystem::exists(root / m->sampler.model / "model.safetensors"));
  CHECK(m->tasks.source == task_source_kind::files);  // the held-out built-ins stay unseen
  REQUIRE(m->tasks.files.size() == 2);  // (test_pipeline checks no held-out task is in them)
  for (const auto& f : m->tasks.files) CHECK_MESSAGE(std::filesystem::exists(root / f), f);
  CHECK(m->sandbox.backend == sandbox_backend::nvcc);
  CHECK(m->sampler.require_gpu);
  CHECK(m->run.time_limit_s > 0);
  // The demonstration's 15 minutes hold with the longest drain (15 s), final checkpoint wait
  // (60 s) and shutdown (10 s) the head allows after the limit.
  CHECK(m->run.time_limit_s + 15 + 60 + 10 <= 15 * 60);
  // The bound of the two measured runs with these task files (bench/RESULTS.md, 2026-12-04): a
  // change to it is a new, unmeasured default.
  CHECK(m->run.time_limit_s == 450.0);
  CHECK(m->run.stall_timeout_s <= 120);  // a stall is still a stall, not a time-limited stop
  // The built-in values the "(left out: X)" notes above those keys name.
  const auto left_out = parse_manifest(minimal, "minimal.toml");
  REQUIRE(left_out.ok());
  CHECK(left_out->sampler.model.empty());
  CHECK_FALSE(left_out->sampler.require_gpu);
  CHECK(left_out->sandbox.backend == sandbox_backend::stand_in);
  CHECK(left_out->run.time_limit_s == 0.0);
  CHECK(left_out->run.stall_timeout_s == 20.0);
  CHECK(left_out->tasks.source == task_source_kind::builtin);
  CHECK(left_out->sampler.max_new_tokens == 2048);
  CHECK(left_out->trainer.lr == doctest::Approx(3e-6));
  CHECK(left_out->trainer.checkpoint_every == 50);
  CHECK(left_out->sandbox.compile_jobs == 2);
  // The demonstrations so far were measured with a group's repeats judged once.
  CHECK(m->sandbox.reuse_verdicts == verdict_reuse_scope::group);
  CHECK(left_out->sandbox.reuse_verdicts == verdict_reuse_scope::group);
  // The demonstration was measured with run-wide dedup (bench/RESULTS.md, 2026-12-02).
  CHECK(m->buffer.dedup == dedup_scope::run);
  CHECK(left_out->buffer.dedup == dedup_scope::group);
  CHECK(m->trainer.baseline == group_baseline::draws);
  CHECK(left_out->trainer.baseline == group_baseline::kept);
}

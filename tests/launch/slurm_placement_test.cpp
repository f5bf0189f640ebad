// A manifest placed on a Slurm allocation: node names to nodes, links across nodes to tcp
// endpoints on the binding end's node, and what does not fit said plainly.
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>

#include "launch/slurm_placement.hpp"

using namespace kforge;
using namespace kforge::launch;
using namespace kforge::pipeline;

namespace {

// The head with every stage but the sandbox workers, which run on a node of their own.
const std::string remote_sandbox = R"(
[run]
name = "placed"
run_dir = "/tmp/kforge-placed"

[[process]]
name = "head"
[process.actors]
task_generator = {}
sampler = {}
sandbox_pool = {}
reward = {}
buffer = {}
trainer = {}

[[process]]
name = "judges"
node = "sandbox"
[process.actors]
sandbox_worker = { count = 2 }
)";

slurm_allocation two_nodes() {
  slurm_allocation a;
  a.job_id = "1234";
  a.nodes = {"n1", "n2"};
  a.head_node = "n1";
  a.addresses = {{"n1", "10.0.0.1"}};  // n2 is reached by its name
  return a;
}

bool contains(const std::string& s, std::string_view what) { return s.find(what) != std::string::npos; }

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("the manifest's node names take the allocation's other nodes; cross-node links get tcp") {
  auto p = place_on_allocation(remote_sandbox, "remote.toml", two_nodes(), 30000);
  REQUIRE_MESSAGE(p.ok(), p.message());
  REQUIRE(p->nodes.size() == 1);
  CHECK(p->nodes[0] == std::pair<std::string, std::string>{"sandbox", "n2"});
  const manifest& m = p->m;
  CHECK(m.find_process("judges")->node == "n2");
  CHECK(m.find_process("head")->is_local());
  // The pool binds the workers' link on the head's node, by its NodeAddr; the head binds control
  // and metrics there too. Ports: the base plus the link's index.
  CHECK(m.endpoint(link::sandbox_workers) == "tcp://10.0.0.1:" + std::to_string(30000 + static_cast<int>(link::sandbox_workers)));
  CHECK(m.endpoint(link::control) == "tcp://10.0.0.1:" + std::to_string(30000 + static_cast<int>(link::control)));
  CHECK(m.endpoint(link::metrics) == "tcp://10.0.0.1:" + std::to_string(30000 + static_cast<int>(link::metrics)));
  // Links inside the head stay inproc.
  CHECK(m.endpoint(link::tasks).rfind("inproc://", 0) == 0);
  // The text is what the workers read: it names the node and the endpoints, and reads back alone.
  CHECK(contains(m.text, "Slurm job 1234"));
  auto again = parse_manifest(m.text, "snapshot");
  REQUIRE_MESSAGE(again.ok(), again.message());
  CHECK(again->endpoint(link::sandbox_workers) == m.endpoint(link::sandbox_workers));
  CHECK(again->find_process("judges")->node == "n2");
}

TEST_CASE("a link bound on another node takes that node's address") {
  // The buffer and trainer on node "learn": scored is bound by the buffer there, batches stays
  // inside its process, weights is bound by the trainer there.
  const std::string text = R"(
[[process]]
name = "head"
[process.actors]
task_generator = {}
sampler = {}
sandbox_pool = {}
sandbox_worker = {}
reward = {}

[[process]]
name = "learner"
node = "learn"
[process.actors]
buffer = {}
trainer = {}
)";
  auto p = place_on_allocation(text, "learn.toml", two_nodes(), 40000);
  REQUIRE_MESSAGE(p.ok(), p.message());
  CHECK(p->m.endpoint(link::scored) == "tcp://n2:" + std::to_string(40000 + static_cast<int>(link::scored)));
  CHECK(p->m.endpoint(link::weights) == "tcp://n2:" + std::to_string(40000 + static_cast<int>(link::weights)));
  CHECK(p->m.endpoint(link::batches).rfind("inproc://", 0) == 0);
}

TEST_CASE("an endpoint the manifest sets is kept") {
  auto p = place_on_allocation(remote_sandbox + "\n[endpoints]\nsandbox_workers = \"tcp://10.9.9.9:5555\"\n",
                               "set.toml", two_nodes(), 30000);
  REQUIRE_MESSAGE(p.ok(), p.message());
  CHECK(p->m.endpoint(link::sandbox_workers) == "tcp://10.9.9.9:5555");
}

TEST_CASE("more node names than the allocation has nodes is an error naming both") {
  auto a = two_nodes();
  a.nodes = {"n1"};
  auto p = place_on_allocation(remote_sandbox, "remote.toml", a, 30000);
  REQUIRE_FALSE(p.ok());
  INFO(p.message());
  CHECK(contains(p.message(), "places processes on 2 nodes (\"local\", sandbox) but the allocation has 1 (n1)"));
  CHECK(contains(p.message(), "--nodes=2"));
}

TEST_CASE("a manifest error is said as parse_manifest says it") {
  auto p = place_on_allocation(remote_sandbox + "\n[run2]\n", "typo.toml", two_nodes(), 30000);
  REQUIRE_FALSE(p.ok());
  CHECK(contains(p.message(), "typo.toml"));
  auto syntax = place_on_allocation("[[process]\n", "syntax.toml", two_nodes(), 30000);
  REQUIRE_FALSE(syntax.ok());
  CHECK(contains(syntax.message(), "TOML syntax error"));
}

TEST_CASE("without a launcher a link across nodes needs an explicit endpoint, and says how to get one") {
  auto m = parse_manifest(remote_sandbox, "remote.toml");
  REQUIRE_FALSE(m.ok());
  CHECK(contains(m.message(), "kforge run --launcher slurm"));
}

TEST_CASE("the 4x8 example places on four nodes of eight GPUs") {
  const std::string path = std::string(KFORGE_SOURCE_DIR) + "/deploy/slurm/kforge_4x8.toml";
  slurm_allocation a;
  a.job_id = "99";
  a.nodes = {"gpu01", "gpu02", "gpu03", "gpu04"};
  a.head_node = "gpu01";
  a.gpus_per_node = 8;
  auto p = place_on_allocation(read(path), path, a, 30000);
  REQUIRE_MESSAGE(p.ok(), p.message());
  CHECK(p->nodes.size() == 3);
  CHECK(p->m.find_process("rollout-a")->node == "gpu02");
  CHECK(p->m.find_process("rollout-b")->node == "gpu03");
  CHECK(p->m.find_process("sandbox")->node == "gpu04");
  CHECK(p->m.endpoint(link::tasks).rfind("tcp://gpu01:", 0) == 0);
  CHECK(p->m.endpoint(link::sandbox_workers).rfind("tcp://gpu01:", 0) == 0);

  SUBCASE("too few GPUs a node") {
    a.gpus_per_node = 4;
    auto q = place_on_allocation(read(path), path, a, 30000);
    REQUIRE_FALSE(q.ok());
    INFO(q.message());
    CHECK(contains(q.message(), "names GPU 7, but the allocation has 4 GPU(s) on node gpu01"));
  }
  SUBCASE("too few nodes") {
    a.nodes = {"gpu01", "gpu02", "gpu03"};
    auto q = place_on_allocation(read(path), path, a, 30000);
    REQUIRE_FALSE(q.ok());
    CHECK(contains(q.message(), "the allocation has 3"));
  }
}

TEST_CASE("groups on different nodes may name the same GPUs; on one node they may not") {
  const std::string apart = R"(
[gpu_groups]
a = [0]
b = [0]
[[process]]
name = "head"
[process.actors]
task_generator = {}
sandbox_pool = {}
reward = {}
buffer = {}
trainer = { gpu_group = "a" }
[[process]]
name = "roll"
node = "r"
[process.actors]
sampler = { gpu_group = "b" }
sandbox_worker = {}
)";
  auto a = two_nodes();
  a.gpus_per_node = 1;
  auto placed = place_on_allocation(apart, "apart.toml", a, 30000);
  CHECK_MESSAGE(placed.ok(), (placed.ok() ? "" : placed.message()));
  auto no_gpus = place_on_allocation(apart, "apart.toml", two_nodes(), 30000);
  REQUIRE_FALSE(no_gpus.ok());
  CHECK(contains(no_gpus.message(), "names GPU 0, but the allocation has 0 GPU(s) on node n1"));
  std::string together = apart;
  together.replace(together.find("node = \"r\""), 10, "node = \"local\"");
  auto m = parse_manifest(together, "together.toml");
  REQUIRE_FALSE(m.ok());
  CHECK(contains(m.message(), "GPU 0 is in two groups"));
}

TEST_CASE("the port base follows the job id and moves past ports in use") {
  auto any = [](int) { return true; };
  const auto a = choose_port_base("1234", any);
  REQUIRE(a.ok());
  CHECK(*a == *choose_port_base("1234", any));
  CHECK(*a >= 20000);
  CHECK(*a + ports_per_run <= 65000);
  const int taken = *a + 3;
  const auto b = choose_port_base("1234", [&](int p) { return p != taken; });
  REQUIRE(b.ok());
  CHECK(*b != *a);
  CHECK_FALSE(choose_port_base("1234", [](int) { return false; }).ok());
}

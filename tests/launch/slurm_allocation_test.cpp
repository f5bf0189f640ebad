// The allocation read from the environment Slurm gives a batch script.
#include <doctest/doctest.h>

#include <map>

#include "launch/slurm_allocation.hpp"

using namespace kforge::launch;

namespace {

env_lookup env_of(std::map<std::string, std::string> vars) {
  return [vars](std::string_view name) -> std::optional<std::string> {
    const auto it = vars.find(std::string(name));
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

}  // namespace

TEST_CASE("nodes, the head's node and GPUs from the environment") {
  auto a = allocation_from(env_of({{"SLURM_JOB_ID", "42"},
                                   {"SLURM_JOB_NODELIST", "gpu[01-04]"},
                                   {"SLURMD_NODENAME", "gpu01"},
                                   {"SLURM_GPUS_ON_NODE", "8"},
                                   {"SLURM_CPUS_ON_NODE", "96"}}));
  REQUIRE(a.ok());
  CHECK(a->job_id == "42");
  CHECK(a->nodes == std::vector<std::string>{"gpu01", "gpu02", "gpu03", "gpu04"});
  CHECK(a->head_node == "gpu01");
  CHECK(a->gpus_per_node == 8);
  CHECK(a->cpus_per_node == 96);
}

TEST_CASE("without SLURMD_NODENAME the head is on the first node; GPUs from other variables") {
  auto a = allocation_from(env_of({{"SLURM_JOB_ID", "7"},
                                   {"SLURM_JOB_NODELIST", "b,a"},
                                   {"SLURM_GPUS_PER_NODE", "h100:4"}}));
  REQUIRE(a.ok());
  CHECK(a->head_node == "b");
  CHECK(a->gpus_per_node == 4);
  auto b = allocation_from(env_of({{"SLURM_JOB_ID", "7"}, {"SLURM_JOB_NODELIST", "a"}, {"SLURM_JOB_GPUS", "0,1,2"}}));
  REQUIRE(b.ok());
  CHECK(b->gpus_per_node == 3);
  auto none = allocation_from(env_of({{"SLURM_JOB_ID", "7"}, {"SLURM_JOB_NODELIST", "a"}}));
  REQUIRE(none.ok());
  CHECK(none->gpus_per_node == 0);
}

TEST_CASE("GPU counts as Slurm writes them") {
  CHECK(*parse_gpu_count("8", false) == 8);
  CHECK(*parse_gpu_count("gpu:h100:8", false) == 8);
  CHECK(*parse_gpu_count("a100:2,v100:2", false) == 4);
  CHECK(*parse_gpu_count("0,1,2,3", true) == 4);
  CHECK_FALSE(parse_gpu_count("eight", false).ok());
  CHECK_FALSE(parse_gpu_count("0,x", true).ok());
}

TEST_CASE("outside an allocation, or with a bad variable, the error says what is wrong") {
  auto outside = allocation_from(env_of({}));
  REQUIRE_FALSE(outside.ok());
  CHECK(outside.message().find("not inside a Slurm allocation") != std::string::npos);
  auto bad_list = allocation_from(env_of({{"SLURM_JOB_ID", "1"}, {"SLURM_JOB_NODELIST", "n[1-"}}));
  REQUIRE_FALSE(bad_list.ok());
  CHECK(bad_list.message().find("SLURM_JOB_NODELIST: malformed") != std::string::npos);
  auto stranger = allocation_from(env_of({{"SLURM_JOB_ID", "1"}, {"SLURM_JOB_NODELIST", "n[1-2]"}, {"SLURMD_NODENAME", "login"}}));
  REQUIRE_FALSE(stranger.ok());
  CHECK(stranger.message().find("\"login\" is not one of the allocation's nodes") != std::string::npos);
  auto bad_gpus = allocation_from(env_of({{"SLURM_JOB_ID", "1"}, {"SLURM_JOB_NODELIST", "n1"}, {"SLURM_GPUS_ON_NODE", "x"}}));
  REQUIRE_FALSE(bad_gpus.ok());
  CHECK(bad_gpus.message().find("SLURM_GPUS_ON_NODE") != std::string::npos);
}

TEST_CASE("node addresses from scontrol show node -o") {
  const auto m = node_addresses(
      "NodeName=n1 Arch=x86_64 CoresPerSocket=1 NodeAddr=10.0.0.1 NodeHostName=n1 Version=22.05\n"
      "NodeName=n2 Arch=x86_64 NodeAddr=n2 NodeHostName=n2\n");
  CHECK(m.size() == 1);
  CHECK(m.at("n1") == "10.0.0.1");
  slurm_allocation a;
  a.addresses = m;
  CHECK(a.address_of("n1") == "10.0.0.1");
  CHECK(a.address_of("n2") == "n2");
}

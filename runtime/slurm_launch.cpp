#include "runtime/slurm_launch.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <ostream>

#include "common/subprocess.hpp"
#include "launch/srun_step.hpp"

namespace kforge::pipeline {

namespace {

// Whether nothing listens on tcp `port` of this node: a bind to it on every interface succeeds.
bool port_free_here(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return true;  // cannot tell: the bind in the process that needs it will say
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool ok = ::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

result<slurm_launch> place_on_slurm(std::string_view text, const std::string& source) {
  slurm_launch s;
  auto a = launch::allocation_from(launch::process_environment());
  if (!a) return a.err();
  s.allocation = std::move(*a);
  // Slurm's NodeAddr is how it reaches each node itself; without scontrol the names are used.
  std::string nodes;
  for (const auto& n : s.allocation.nodes) nodes += (nodes.empty() ? "" : ",") + n;
  if (auto out = run_process({"scontrol", "show", "node", "-o", nodes}, std::chrono::seconds(20));
      out && out->exit_code == 0)
    s.allocation.addresses = launch::node_addresses(out->output);
  auto base = launch::choose_port_base(s.allocation.job_id, port_free_here);
  if (!base) return base.err();
  auto placed = launch::place_on_allocation(text, source, s.allocation, *base);
  if (!placed) return placed.err();
  s.placed = std::move(*placed);
  return s;
}

result<slurm_launch> place_file_on_slurm(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return error{path + ": cannot open manifest: " + std::strerror(errno)};
  std::ostringstream text;
  text << in.rdbuf();
  return place_on_slurm(text.str(), path);
}

void print_placement(const slurm_launch& s, std::ostream& out) {
  const auto& a = s.allocation;
  out << "slurm: job " << a.job_id << ", " << a.nodes.size() << " node(s), " << a.gpus_per_node
      << " GPU(s) a node; head on " << a.head_node << " (\"local\")\n";
  for (const auto& [name, node] : s.placed.nodes)
    out << "slurm: node \"" << name << "\" -> " << node
        << (a.address_of(node) != node ? " (" + a.address_of(node) + ")" : std::string()) << "\n";
  for (const auto& e : s.placed.m.endpoints)
    if (e.address.rfind("tcp://", 0) == 0)
      out << "slurm: link " << to_string(e.id) << " at " << e.address << "\n";
}

head_run::remote_launcher slurm_steps(const slurm_launch& s) {
  const int cpus = s.allocation.cpus_per_node;
  return {[cpus](const process_spec& p, const std::string& log) {
            return launch::srun_step(p.node, p.name, cpus, log, {});
          },
          [](const process_spec& p) { return "Slurm job step on node " + p.node; }};
}

}  // namespace kforge::pipeline

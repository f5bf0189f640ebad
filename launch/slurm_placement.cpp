#include "launch/slurm_placement.hpp"

#include <algorithm>
#include <map>
#include <sstream>

#include <toml++/toml.h>

namespace kforge::launch {

using pipeline::actor_kind;
using pipeline::link;

actor_kind bound_by(link l) {
  switch (l) {
    case link::tasks: return actor_kind::task_generator;
    case link::candidates: return actor_kind::sandbox_pool;
    case link::sandbox_workers: return actor_kind::sandbox_pool;
    case link::verdicts: return actor_kind::reward;
    case link::scored: return actor_kind::buffer;
    case link::batches: return actor_kind::buffer;
    case link::weights: return actor_kind::trainer;
    case link::feedback: return actor_kind::task_generator;
    case link::observations: return actor_kind::reward;
    case link::control:
    case link::metrics: break;  // the head's
  }
  return actor_kind::task_generator;
}

const pipeline::process_spec& binding_process(const pipeline::manifest& m, link l) {
  if (pipeline::info(l).every_process) return m.head();
  const auto hosts = m.hosts(bound_by(l));
  return hosts.empty() ? m.head() : *hosts.front();
}

result<int> choose_port_base(std::string_view job_id, const std::function<bool(int)>& port_free) {
  // A stable spread of the id over the range (not std::hash: the same job must get the same
  // ports in every process that computes them).
  std::uint32_t h = 2166136261u;
  for (char c : job_id) h = (h ^ static_cast<unsigned char>(c)) * 16777619u;
  constexpr int first = 20000;
  constexpr int slots = (65000 - first) / ports_per_run;
  for (int attempt = 0; attempt < 64; ++attempt) {
    const int base = first + static_cast<int>((h + static_cast<std::uint32_t>(attempt)) % slots) * ports_per_run;
    bool all_free = true;
    for (int p = base; p < base + ports_per_run && all_free; ++p) all_free = port_free(p);
    if (all_free) return base;
  }
  return error{"no run of " + std::to_string(ports_per_run) +
               " free tcp ports found on this node in 64 tries (20000-64999)"};
}

namespace {

toml::table* process_table(toml::table& root, std::size_t i) {
  auto* arr = root["process"].as_array();
  return arr && i < arr->size() ? (*arr)[i].as_table() : nullptr;
}

// The node names of the [[process]] entries in file order ("local" where left out). Entries of
// the wrong shape are left to parse_manifest, which says what is wrong with them.
std::vector<std::string> node_names(toml::table& root) {
  std::vector<std::string> out;
  auto* arr = root["process"].as_array();
  for (std::size_t i = 0; arr && i < arr->size(); ++i) {
    const toml::table* t = (*arr)[i].as_table();
    out.push_back(t ? (*t)["node"].value_or(std::string("local")) : std::string("local"));
  }
  return out;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

result<toml::table> parse_toml(std::string_view text, const std::string& source) {
#if TOML_EXCEPTIONS
  try {
    return toml::parse(text, source);
  } catch (const toml::parse_error&) {
  }
#else
  if (auto parsed = toml::parse(text, source)) return std::move(parsed).table();
#endif
  // parse_manifest says where and why.
  auto m = pipeline::parse_manifest(text, source);
  return error{m ? source + ": not TOML" : m.message()};
}

// Each GPU a process's groups name must exist on the node it runs on.
status check_gpus(const pipeline::manifest& m, const slurm_allocation& a,
                  const std::map<std::string, std::string>& host_of) {
  for (const auto& p : m.processes)
    for (const auto& actor : p.actors) {
      if (actor.gpu_group.empty()) continue;
      const auto* g = m.find_gpu_group(actor.gpu_group);
      if (!g || g->automatic || g->gpus.empty()) continue;
      const int highest = *std::max_element(g->gpus.begin(), g->gpus.end());
      if (highest < a.gpus_per_node) continue;
      return error{m.source + ": process " + p.name + " runs its " +
                   std::string(pipeline::to_string(actor.kind)) + " on GPU group \"" + g->name +
                   "\", which names GPU " + std::to_string(highest) + ", but the allocation has " +
                   std::to_string(a.gpus_per_node) + " GPU(s) on node " + host_of.at(p.node) +
                   " (ask for more with sbatch --gpus-per-node, or shrink the group)"};
    }
  return {};
}

}  // namespace

result<placement> place_on_allocation(std::string_view text, const std::string& source,
                                      const slurm_allocation& a, int port_base) {
  auto root = parse_toml(text, source);
  if (!root) return root.err();

  // Node names to allocated nodes: "local" is the head's, the others take the rest in order.
  std::vector<std::string> free_nodes;
  for (const auto& n : a.nodes)
    if (n != a.head_node) free_nodes.push_back(n);
  std::map<std::string, std::string> host_of{{"local", a.head_node}};
  placement out;
  out.port_base = port_base;
  std::vector<std::string> wanted;
  for (const auto& name : node_names(*root))
    if (!host_of.count(name) && std::find(wanted.begin(), wanted.end(), name) == wanted.end())
      wanted.push_back(name);
  if (wanted.size() > free_nodes.size())
    return error{source + ": the manifest places processes on " + std::to_string(wanted.size() + 1) +
                 " nodes (\"local\", " + join(wanted) + ") but the allocation has " +
                 std::to_string(a.nodes.size()) + " (" + join(a.nodes) +
                 "); ask sbatch for --nodes=" + std::to_string(wanted.size() + 1)};
  for (std::size_t i = 0; i < wanted.size(); ++i) {
    host_of[wanted[i]] = free_nodes[i];
    out.nodes.emplace_back(wanted[i], free_nodes[i]);
  }

  // Links across nodes: tcp on the binding process's node.
  auto derive = [&](link l, const pipeline::manifest& m) -> result<std::string> {
    const auto& binder = binding_process(m, l);
    const auto it = host_of.find(binder.node);
    if (it == host_of.end()) return error{"process " + binder.name + " has no node"};
    return "tcp://" + a.address_of(it->second) + ":" + std::to_string(port_base + static_cast<int>(l));
  };
  auto roles = pipeline::parse_manifest(text, source, derive);
  if (!roles) return roles.err();
  if (auto s = check_gpus(*roles, a, host_of); !s) return s.err();

  // The placed text: allocated node names and the derived tcp endpoints written in.
  for (std::size_t i = 0; i < roles->processes.size(); ++i)
    if (auto* t = process_table(*root, i); t && !roles->processes[i].is_local())
      t->insert_or_assign("node", host_of.at(roles->processes[i].node));
  for (const auto& e : roles->endpoints) {
    if (!e.derived || e.address.rfind("tcp://", 0) != 0) continue;
    if (!root->contains("endpoints")) root->insert("endpoints", toml::table{});
    (*root)["endpoints"].as_table()->insert_or_assign(std::string(pipeline::to_string(e.id)), e.address);
  }
  std::ostringstream placed;
  placed << "# " << source << " placed on Slurm job " << a.job_id << " (nodes " << join(a.nodes)
         << "; head on " << a.head_node << ") by kforge run --launcher slurm\n\n"
         << toml::toml_formatter{*root} << "\n";
  auto m = pipeline::parse_manifest(placed.str(), source);
  if (!m) return error{"the manifest placed on the allocation does not read back: " + m.message()};
  out.m = std::move(*m);
  return out;
}

}  // namespace kforge::launch

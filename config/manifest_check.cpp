// Pass 2 of manifest validation: rules that span tables (GPU groups vs actors, processes, stage
// coverage, endpoints), and the derivation of the endpoints a manifest leaves out.

#include <map>
#include <set>
#include <vector>

#include "config/endpoint_check.hpp"
#include "config/manifest_internal.hpp"

namespace kforge::pipeline::detail {
namespace {

std::string quoted(std::string_view s) { return "\"" + std::string(s) + "\""; }

// Nodes for line:column; each may be null when the key is absent (the message then has no position).
const toml::node* node_at(const toml::table& root, std::string_view table, std::string_view key) {
  return root[table][key].node();
}
const toml::node* actor_node(const toml::table& root, std::size_t i, actor_kind k) {
  return root["process"][i]["actors"][to_string(k)].node();
}
const toml::node* actor_field(const toml::table& root, std::size_t i, actor_kind k,
                              std::string_view field) {
  return root["process"][i]["actors"][to_string(k)][field].node();
}
std::string process_key(std::size_t i) { return "process[" + std::to_string(i) + "]"; }

// Why each singleton stage exists once; said in the error so the rule does not look arbitrary.
std::string_view singleton_reason(actor_kind k) {
  switch (k) {
    case actor_kind::task_generator: return "it owns the task pool and the curriculum";
    case actor_kind::sandbox_pool: return "it is the broker every candidate passes through";
    case actor_kind::reward: return "it keeps the per-task baselines";
    case actor_kind::buffer: return "it deduplicates and bounds staleness across all samples";
    default: return "";
  }
}

// The nodes whose processes use each GPU group; a group no process uses counts as on every node.
std::map<std::string, std::set<std::string>> group_nodes(const manifest& m) {
  std::map<std::string, std::set<std::string>> out;
  for (const process_spec& p : m.processes)
    for (const actor_spec& a : p.actors)
      if (!a.gpu_group.empty()) out[a.gpu_group].insert(p.node);
  return out;
}

bool share_a_node(const std::map<std::string, std::set<std::string>>& nodes, const std::string& a,
                  const std::string& b) {
  const auto x = nodes.find(a);
  const auto y = nodes.find(b);
  if (x == nodes.end() || y == nodes.end()) return true;
  for (const auto& n : x->second)
    if (y->second.count(n)) return true;
  return false;
}

// A GPU belongs to one group on each node: groups used only on different nodes ("rollout" on one,
// "trainer" on another) may name the same indices, as each node counts its GPUs from 0.
void check_gpu_groups(const toml::table& root, diagnostics& d, const manifest& m) {
  const auto nodes = group_nodes(m);
  std::map<int, std::vector<std::string>> owners;
  for (const gpu_group& g : m.gpu_groups) {
    const toml::array* a = root["gpu_groups"][g.name].as_array();
    for (std::size_t i = 0; i < g.gpus.size(); ++i) {
      const int gpu = g.gpus[i];
      auto& seen = owners[gpu];
      for (const auto& other : seen)
        if (share_a_node(nodes, other, g.name)) {
          d.add(a ? a->get(i) : nullptr, join_key("gpu_groups", g.name),
                "GPU " + std::to_string(gpu) + " is in two groups, " + quoted(other) + " and " +
                    quoted(g.name) + " (a GPU belongs to one group only on a node)");
          break;
        }
      seen.push_back(g.name);
    }
  }
}

void check_processes(const toml::table& root, diagnostics& d, manifest& m) {
  if (m.processes.empty()) {
    d.add(static_cast<const toml::node*>(&root), "process",
          "missing: the manifest names no process (add at least one [[process]])");
    return;
  }
  std::map<std::string, std::size_t> names;
  std::size_t heads = 0;
  for (std::size_t i = 0; i < m.processes.size(); ++i) {
    process_spec& p = m.processes[i];
    auto [it, fresh] = names.emplace(p.name, i);
    if (!fresh)
      d.add(root["process"][i]["name"].node(),
            process_key(i) + ".name",
            "duplicate process name " + quoted(p.name) + " (also " + process_key(it->second) +
                "); names must be unique");
    if (p.head && ++heads > 1)
      d.add(root["process"][i]["head"].node(), process_key(i) + ".head",
            "head = true on more than one process; exactly one process is the head");
    for (const actor_spec& a : p.actors) {
      if (a.gpu_group.empty()) continue;
      const std::string key = process_key(i) + ".actors." + std::string(to_string(a.kind));
      const gpu_group* g = m.find_gpu_group(a.gpu_group);
      if (!g) {
        std::string known;
        for (const auto& gg : m.gpu_groups) known += (known.empty() ? "" : ", ") + quoted(gg.name);
        d.add(actor_field(root, i, a.kind, "gpu_group"), key + ".gpu_group",
              "unknown GPU group " + quoted(a.gpu_group) + " (known: " +
                  (known.empty() ? std::string("none; define it under [gpu_groups]") : known) + ")");
      } else if (a.kind == actor_kind::trainer && !g->automatic && !g->gpus.empty() &&
                 a.count > static_cast<int>(g->gpus.size())) {
        d.add(actor_field(root, i, a.kind, "count"), key + ".count",
              std::to_string(a.count) + " trainer ranks but group " + quoted(g->name) + " has " +
                  std::to_string(g->gpus.size()) + " GPU(s): NCCL needs one GPU per rank");
      }
    }
  }
  if (heads == 0) m.processes.front().head = true;  // the documented default: the first process
  for (std::size_t i = 0; i < m.processes.size(); ++i)
    if (m.processes[i].head && !m.processes[i].is_local())
      d.add(root["process"][i]["node"].node(), process_key(i) + ".node",
            "the head process runs where `kforge run` is started, so its node must be \"local\", "
            "got " + quoted(m.processes[i].node));
}

void check_stages(const toml::table& root, diagnostics& d, const manifest& m) {
  std::string all;
  for (auto k : all_actor_kinds) all += (all.empty() ? "" : ", ") + std::string(to_string(k));
  for (auto k : all_actor_kinds) {
    const auto hosts = m.hosts(k);
    if (hosts.empty()) {
      d.add(root["process"].node(), "process",
            "missing stage: no process hosts a " + std::string(to_string(k)) +
                " (the pipeline needs each of " + all + ")");
      continue;
    }
    if (!is_singleton(k)) continue;
    for (std::size_t i = 0; i < m.processes.size(); ++i) {
      const actor_spec* a = m.processes[i].find(k);
      if (!a) continue;
      const std::string key = process_key(i) + ".actors." + std::string(to_string(k));
      const toml::node* where = actor_node(root, i, k);
      if (a->count != 1)
        d.add(actor_field(root, i, k, "count"), key + ".count",
              "must be 1: the pipeline has exactly one " + std::string(to_string(k)) + " (" +
                  std::string(singleton_reason(k)) + ")");
      if (&m.processes[i] != hosts.front())
        d.add(where, key,
              "a second " + std::string(to_string(k)) + " (also in process " +
                  quoted(hosts.front()->name) + "); the pipeline has exactly one (" +
                  std::string(singleton_reason(k)) + ")");
    }
  }
}

std::string describe_ends(const std::vector<const process_spec*>& procs) {
  std::string s;
  for (const process_spec* p : procs)
    s += (s.empty() ? "" : ", ") + quoted(p->name) +
         (p->is_local() ? std::string(" (local)") : " (node " + quoted(p->node) + ")");
  return s;
}

void check_endpoints(const toml::table& root, diagnostics& d, manifest& m,
                     const cross_node_endpoint& derive) {
  std::vector<endpoint_parts> parts(link_count);
  for (link l : all_links) {
    endpoint_spec& e = m.endpoints[static_cast<int>(l)];
    e.id = l;
    const std::string key = join_key("endpoints", to_string(l));
    const toml::node* where = node_at(root, "endpoints", to_string(l));
    const auto procs = m.processes_on(l);
    bool one_node = true;
    for (const process_spec* p : procs) one_node = one_node && p->node == procs.front()->node;

    if (e.address.empty() && !m.uses(l)) {  // never opened: any name will do
      e.derived = true;
      e.address = "inproc://kforge." + std::string(to_string(l));
      continue;
    }
    if (e.address.empty()) {
      e.derived = true;
      if (procs.size() <= 1) {
        e.address = "inproc://kforge." + std::string(to_string(l));
      } else if (one_node) {
        e.address = "ipc://" + m.run.run_dir + "/bus/" + std::string(to_string(l));
      } else if (derive) {
        auto a = derive(l, m);
        if (!a) {
          d.add(root["endpoints"].node(), key, a.message());
          continue;
        }
        e.address = std::move(*a);
      } else {
        d.add(root["endpoints"].node(), key,
              "missing: this link joins processes on different nodes (" + describe_ends(procs) +
                  "), so it needs an explicit tcp://HOST:PORT endpoint, or a launch that derives "
                  "it from the nodes (kforge run --launcher slurm)");
        continue;
      }
    }
    auto p = check_endpoint(e.address);
    if (!p.ok()) {  // only a derived ipc path can fail here: pass 1 checked the explicit ones
      d.add(root["run"]["run_dir"].node(), key,
            p.message() + "; shorten run.run_dir or set this endpoint");
      continue;
    }
    parts[static_cast<int>(l)] = p.value();
    if (p->scheme == "inproc" && procs.size() > 1)
      d.add(where, key,
            "inproc:// only works inside one process, but this link joins " + describe_ends(procs) +
                "; use ipc:// or tcp://");
    else if (p->scheme == "ipc" && !one_node)
      d.add(where, key,
            "ipc:// only reaches processes on one host, but this link joins " +
                describe_ends(procs) + "; use tcp://");
    else if (p->scheme == "tcp" && p->host == "*" && procs.size() > 1)
      d.add(where, key,
            "tcp://*:PORT cannot be connected to, and this link joins " + describe_ends(procs) +
                "; name the host that binds it (tcp://HOST:PORT)");
  }
  for (std::size_t i = 0; i < link_count; ++i)
    for (std::size_t j = 0; j < i; ++j) {
      if (parts[i].scheme.empty() || parts[j].scheme.empty()) continue;
      if (!endpoints_clash(parts[i], parts[j])) continue;
      const std::string key = join_key("endpoints", to_string(all_links[i]));
      d.add(node_at(root, "endpoints", to_string(all_links[i])), key,
            "endpoint clash: " + quoted(m.endpoints[i].address) + " is also used by link " +
                quoted(to_string(all_links[j])) +
                (m.endpoints[j].address != m.endpoints[i].address
                     ? " (" + quoted(m.endpoints[j].address) + ")"
                     : std::string()) +
                "; every link needs its own socket");
    }
}

}  // namespace

void check_manifest(const toml::table& root, diagnostics& d, manifest& m,
                    const cross_node_endpoint& derive) {
  check_gpu_groups(root, d, m);
  check_processes(root, d, m);
  if (m.processes.empty()) return;
  check_stages(root, d, m);
  if (!d.empty()) return;  // endpoints depend on where the stages are
  check_endpoints(root, d, m, derive);
}

}  // namespace kforge::pipeline::detail

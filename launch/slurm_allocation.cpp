#include "launch/slurm_allocation.hpp"

#include <cctype>
#include <cstdlib>
#include <sstream>

#include "launch/slurm_nodelist.hpp"

namespace kforge::launch {

std::string slurm_allocation::address_of(const std::string& node) const {
  const auto it = addresses.find(node);
  return it == addresses.end() ? node : it->second;
}

env_lookup process_environment() {
  return [](std::string_view name) -> std::optional<std::string> {
    const char* v = std::getenv(std::string(name).c_str());
    if (!v) return std::nullopt;
    return std::string(v);
  };
}

namespace {

bool all_digits(std::string_view s) {
  if (s.empty() || s.size() > 6) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

}  // namespace

result<int> parse_gpu_count(std::string_view text, bool index_list) {
  const std::string t(text);
  if (index_list) {
    // SLURM_JOB_GPUS: the GPU indices of this node, "0,1,2,3".
    int n = 0;
    std::istringstream in(t);
    for (std::string part; std::getline(in, part, ',');) {
      if (!all_digits(part)) return error{"malformed GPU index list \"" + t + "\""};
      ++n;
    }
    if (n == 0) return error{"malformed GPU index list \"" + t + "\""};
    return n;
  }
  // "8", "h100:8", "gpu:h100:8": the count is after the last colon. A per-node list of several
  // types ("a100:2,v100:2") adds up.
  int total = 0;
  std::istringstream in(t);
  for (std::string part; std::getline(in, part, ',');) {
    const auto colon = part.rfind(':');
    const std::string count = colon == std::string::npos ? part : part.substr(colon + 1);
    if (!all_digits(count)) return error{"malformed GPU count \"" + t + "\""};
    total += std::stoi(count);
  }
  if (t.empty()) return error{"malformed GPU count \"\""};
  return total;
}

result<slurm_allocation> allocation_from(const env_lookup& env) {
  slurm_allocation a;
  const auto job = env("SLURM_JOB_ID");
  const auto list = env("SLURM_JOB_NODELIST");
  if (!job || !list)
    return error{"not inside a Slurm allocation: SLURM_JOB_ID and SLURM_JOB_NODELIST are unset "
                 "(run it from an sbatch script, e.g. deploy/slurm/kforge.sbatch, or inside salloc)"};
  a.job_id = *job;
  auto nodes = expand_nodelist(*list);
  if (!nodes) return error{"SLURM_JOB_NODELIST: " + nodes.message()};
  a.nodes = std::move(*nodes);
  const auto here = env("SLURMD_NODENAME");
  if (here && !here->empty()) {
    bool known = false;
    for (const auto& n : a.nodes) known = known || n == *here;
    if (!known)
      return error{"SLURMD_NODENAME \"" + *here + "\" is not one of the allocation's nodes (" + *list +
                   "); run kforge run on a node of the allocation"};
    a.head_node = *here;
  } else {
    a.head_node = a.nodes.front();
  }
  // The GPUs of a node, from the most specific variable there is.
  struct source {
    const char* name;
    bool index_list;
  };
  for (const source s : {source{"SLURM_GPUS_ON_NODE", false}, source{"SLURM_GPUS_PER_NODE", false},
                         source{"SLURM_JOB_GPUS", true}}) {
    const auto v = env(s.name);
    if (!v || v->empty()) continue;
    auto n = parse_gpu_count(*v, s.index_list);
    if (!n) return error{std::string(s.name) + ": " + n.message()};
    a.gpus_per_node = *n;
    break;
  }
  if (const auto cpus = env("SLURM_CPUS_ON_NODE"); cpus && all_digits(*cpus)) a.cpus_per_node = std::stoi(*cpus);
  return a;
}

std::map<std::string, std::string> node_addresses(std::string_view text) {
  std::map<std::string, std::string> out;
  std::istringstream lines{std::string(text)};
  for (std::string line; std::getline(lines, line);) {
    std::string name, addr;
    std::istringstream fields(line);
    for (std::string f; fields >> f;) {
      if (f.rfind("NodeName=", 0) == 0) name = f.substr(9);
      if (f.rfind("NodeAddr=", 0) == 0) addr = f.substr(9);
    }
    if (!name.empty() && !addr.empty() && addr != name) out[name] = addr;
  }
  return out;
}

}  // namespace kforge::launch

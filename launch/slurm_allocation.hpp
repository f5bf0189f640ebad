#pragma once
// The Slurm allocation `kforge run --launcher slurm` runs in, read from the environment Slurm gives
// a batch script (SLURM_JOB_ID, SLURM_JOB_NODELIST, SLURMD_NODENAME, the GPU counts), and the
// addresses its nodes are reached at (`scontrol show node -o`'s NodeAddr).

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.hpp"

namespace kforge::launch {

struct slurm_allocation {
  std::string job_id;
  /// The allocated nodes in Slurm's order.
  std::vector<std::string> nodes;
  /// The node `kforge run` runs on (SLURMD_NODENAME; the first node when unset): the head's.
  std::string head_node;
  /// GPUs on each node (allocations are taken as alike on every node); 0: none.
  int gpus_per_node = 0;
  /// CPUs of the allocation on the head's node (SLURM_CPUS_ON_NODE); 0: unknown. Each job step
  /// asks for as many, so a worker is not pinned to one CPU.
  int cpus_per_node = 0;
  /// The address each node is reached at, where Slurm knows one other than its name.
  std::map<std::string, std::string> addresses;

  /// The address other nodes reach `node` at: its NodeAddr, else its name.
  std::string address_of(const std::string& node) const;
};

/// Reads one environment variable; nullopt when unset.
using env_lookup = std::function<std::optional<std::string>(std::string_view)>;
/// The process's own environment.
env_lookup process_environment();

/// The allocation described by `env`. Errors: not inside an allocation (no SLURM_JOB_ID or
/// SLURM_JOB_NODELIST: run it from an sbatch script or salloc), a malformed node list or GPU
/// count, a SLURMD_NODENAME that is not one of the nodes.
result<slurm_allocation> allocation_from(const env_lookup& env);

/// A GPU count as Slurm writes it: "8", "h100:8", "gpu:h100:8" (SLURM_GPUS_PER_NODE,
/// SLURM_GPUS_ON_NODE), or a list of GPU indices "0,1,2,3" (SLURM_JOB_GPUS) when `index_list`.
result<int> parse_gpu_count(std::string_view text, bool index_list);

/// Node name -> NodeAddr from `scontrol show node -o` (one node a line, KEY=VALUE fields); a node
/// whose address is its name is left out.
std::map<std::string, std::string> node_addresses(std::string_view scontrol_text);

}  // namespace kforge::launch

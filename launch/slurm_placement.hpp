#pragma once
// A manifest placed on a Slurm allocation: each node name of its [[process]] entries given a node
// of the allocation, and each link between processes on different nodes given a tcp endpoint on
// the node of the end that binds it. The result is a manifest like any other (nodes named, tcp
// endpoints explicit), so the processes started on the nodes read it without knowing of Slurm.
//
// Node names: "local" is the head's node (where `kforge run` runs: the batch script's node). Every
// other name stands for one more node: the names take the allocation's other nodes in the order
// they first appear in the file. A manifest naming more nodes than the allocation has is an error
// naming both.
//
// Endpoints: a link the manifest leaves out is derived as before inside a process (inproc://) and
// a node (ipc:// under the run directory); across nodes it becomes tcp://ADDRESS:PORT with ADDRESS
// the binding node's address (Slurm's NodeAddr, else its name) and PORT = port base + the link's
// index. A link the manifest sets is kept as written.

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.hpp"
#include "config/manifest.hpp"
#include "launch/slurm_allocation.hpp"

namespace kforge::launch {

/// Which end of a link binds its socket (docs/architecture.md's "bound by"): the head for the
/// links every process joins, otherwise the singleton or central end.
pipeline::actor_kind bound_by(pipeline::link l);

/// The process that binds link `l` in `m`.
const pipeline::process_spec& binding_process(const pipeline::manifest& m, pipeline::link l);

/// Ports a launch takes: one per link from the base.
inline constexpr int ports_per_run = static_cast<int>(pipeline::link_count);

/// The first port of a job's links: spread over 20000..64999 by the job id, so jobs sharing a node
/// rarely meet, and moved on by `ports_per_run` while `port_free` says one of the ports is taken
/// on the head's node (the only node whose ports can be seen from here). An error after 64 tries.
result<int> choose_port_base(std::string_view job_id, const std::function<bool(int)>& port_free);

struct placement {
  /// The placed manifest: its text is what every process of the run reads.
  pipeline::manifest m;
  /// Each node name of the file other than "local", with the allocated node it runs on.
  std::vector<std::pair<std::string, std::string>> nodes;
  int port_base = 0;
};

/// Places the manifest `text` (read from `source`) on `a` with links from `port_base`. Errors: the
/// manifest's own (as parse_manifest says them), more node names than the allocation has nodes
/// besides the head's, a GPU group naming a GPU index a node does not have.
result<placement> place_on_allocation(std::string_view text, const std::string& source,
                                      const slurm_allocation& a, int port_base);

}  // namespace kforge::launch

#pragma once
// Slurm's compressed host lists ("node[01-04,07],gpu-a1,rack[1-2]-n[1-2]"), as SLURM_JOB_NODELIST
// holds them, expanded to node names in Slurm's order. Read here rather than by running
// `scontrol show hostnames`, so a launch and its tests need no Slurm command for it.

#include <string>
#include <string_view>
#include <vector>

#include "common/result.hpp"

namespace kforge::launch {

/// The node names of `list`, in order: comma-separated entries, each a name with zero or more
/// bracketed ranges ("[01-04,07]": numbers keep the zero padding of the range's first bound; two
/// brackets make every combination, the first varying slowest). An error names the entry and what
/// is wrong (an unclosed bracket, a range that runs backwards, an empty name); a name given twice
/// is an error too: one node cannot be two nodes of an allocation.
result<std::vector<std::string>> expand_nodelist(std::string_view list);

}  // namespace kforge::launch

#pragma once
// `kforge run --launcher slurm`: the run's manifest placed on the Slurm allocation it runs in
// (launch/slurm_placement.hpp), and the head's processes on other nodes started as job steps.
// What needs the machine lives here (the environment, scontrol, a look at which ports are free
// on the head's node); the placement itself is plain and tested on its own.

#include <iosfwd>
#include <string>
#include <string_view>

#include "common/result.hpp"
#include "config/manifest.hpp"
#include "launch/slurm_allocation.hpp"
#include "launch/slurm_placement.hpp"
#include "runtime/head_run.hpp"

namespace kforge::pipeline {

struct slurm_launch {
  launch::slurm_allocation allocation;
  launch::placement placed;
};

/// The manifest `text` (read from `source`) placed on the allocation the environment describes. The nodes' addresses come from
/// `scontrol show node -o` (their names where it cannot say), the port base from the job id and
/// the ports free on this node. An error says what is missing or does not fit.
result<slurm_launch> place_on_slurm(std::string_view text, const std::string& source);

/// place_on_slurm for the manifest file at `path`.
result<slurm_launch> place_file_on_slurm(const std::string& path);

/// The placement for people: the job, each node name's node, the links across nodes.
void print_placement(const slurm_launch& s, std::ostream& out);

/// Starts a process placed on another node as `srun ... kforge worker ...` on it.
head_run::remote_launcher slurm_steps(const slurm_launch& s);

}  // namespace kforge::pipeline

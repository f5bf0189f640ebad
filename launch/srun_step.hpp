#pragma once
// The srun command line that starts one process of a run as a Slurm job step on its node.

#include <string>
#include <vector>

namespace kforge::launch {

/// `srun` with `command` as one task on `node`. --overlap lets the step share the node's CPUs,
/// memory and GPUs with the run's other steps there (Slurm 20.11+ gives each step resources of
/// its own otherwise, and a second process on a node would wait for the first to end); a step
/// gets every GPU the job has on its node, as Slurm gives steps by default. `cpus` > 0 asks for
/// that many CPUs, so the process is not confined to one (nvcc and the sandbox's children use
/// them); --kill-on-bad-exit ends the step when its task fails. The job name says which process
/// the step is in squeue and sacct. The process's output goes to `log`, appended, written on its
/// node (so srun's own messages, which stay on srun's output, do not end it: its last line is the
/// process's reason for stopping).
std::vector<std::string> srun_step(const std::string& node, const std::string& process, int cpus,
                                   const std::string& log, const std::vector<std::string>& command);

}  // namespace kforge::launch

#pragma once
// Nsight Compute profiles of correct candidates: finding ncu, its command line, and what its
// output means. The runner (runner.cpp, candidate_run::profile) uses these after a candidate is
// judged ok, while it holds the GPU exclusively.
//
// How a candidate is profiled: ncu itself is started as a candidate child would be (the same
// confinement: user, mount, PID, network and IPC namespaces, the read-only root with ncu's own
// folder added, the unprivileged user, no_new_privs), with `kforge sandbox-child` as the program
// it launches, so the child inherits all of it and its control channel (fd 3). The supervisor
// then speaks the ordinary protocol (child_protocol.hpp) to it — hello, probe (which installs the
// seccomp filter, as in every candidate child), load, and `profile`: one call of the candidate on
// the primary inputs of a seed between cudaProfilerStart and cudaProfilerStop. ncu runs with
// --profile-from-start off, so only that call's kernels are profiled (not the probe's, nor the
// child's own poison and comparison kernels), at most `max_launches` of them. The candidate's
// process is never started outside the confinement: ncu cannot reach into a process it did not
// launch without a privileged attach, and wrapping ncu in the confinement keeps the one way
// children are started.
//
// A profile is advice shown to the model, never part of the reward: a candidate that prints a
// forged report into ncu's output can only mislead its own next turn.

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "common/result.hpp"
#include "sandbox/ncu_report.hpp"

namespace kforge::sandbox {

/// The Nsight Compute sections the report parser (ncu_report.hpp) reads its values from.
const std::vector<std::string>& ncu_sections();

/// Finds ncu: `configured` ([sandbox] ncu) when given (then only there), else $KFORGE_NCU, PATH,
/// /usr/local/cuda/bin/ncu. Its absolute path, or an error saying where it looked.
result<std::string> find_ncu(const std::string& configured);

/// The folder an ncu installation lives in (its real path's parent, e.g.
/// /opt/nvidia/nsight-compute/2025.3.1 for /usr/local/cuda/bin/ncu), which a confined ncu must
/// see read-only.
std::string ncu_install_dir(const std::string& ncu);

/// `ncu --csv --page details --section ... --profile-from-start off --launch-count N
/// --target-processes application-only TARGET...`: a CSV report of at most `max_launches` kernels
/// launched between the target's cudaProfilerStart and cudaProfilerStop.
std::vector<std::string> ncu_command(const std::string& ncu, const std::vector<std::string>& target,
                                     int max_launches);

/// What one profiling attempt came to: a profile, or why none (`skipped`). `denied` marks the
/// one skip that holds for every later candidate on the host (the driver lets only
/// administrators read the GPU's counters), so the runner stops trying.
struct profile_outcome {
  std::optional<kernel_profile> profile;
  std::string skipped;
  bool denied = false;
};

/// Reads ncu's output (its report and the program's output, interleaved): a permission error
/// (ERR_NVGPUCTRPERM, "does not have permission"), a report without any profiled kernel, or the
/// slowest profiled kernel. `timed_out`: ncu ran past `limit` and was killed (the report is then
/// dropped whatever it holds).
profile_outcome read_ncu_output(const std::string& output, bool timed_out, std::chrono::milliseconds limit);

}  // namespace kforge::sandbox

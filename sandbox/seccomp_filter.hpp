#pragma once
// The seccomp filter a candidate child installs on itself (all its threads) once the CUDA runtime,
// torch and the known-good kernel have run, and before any candidate library is loaded: the
// driver's start-up needs nothing it forbids, and candidate code never runs without it.
//
// Default allow: the CUDA driver's ioctls, mmaps and threads are many and undocumented, and a
// kernel needs none of what is denied. Denied calls kill the whole process (SIGSYS), which the
// supervisor reports as hack_suspected:
//   - making processes (fork, vfork, clone without CLONE_THREAD) and exec;
//   - ptrace and other processes' memory; signals to any process but this one;
//   - new sockets and connections (the control socket is inherited: sendmsg stays);
//   - mounts, namespaces, chroot, pivot_root; leaving the process group (setsid, setpgid);
//   - io_uring (its operations bypass seccomp), bpf, userfaultfd, perf events, keyrings, kernel
//     modules, reboot, swap, clock and time setting, personality, handle-based opens, uid changes.
// clone3 fails with ENOSYS instead (its flags sit in memory the filter cannot read; glibc then
// falls back to clone, whose flags it can). Writes outside the scratch directory are stopped by
// the read-only root (common/confinement.hpp), not here.
#include "common/result.hpp"

namespace kforge::sandbox {

/// A child Nsight Compute profiles (ncu_profiler.hpp) gets a filter with two differences. ncu's
/// injected library talks to ncu over loopback sockets while it profiles, so sockets and
/// connections are allowed (the child's network namespace holds only loopback, where ncu is). And a
/// denied call is trapped instead of killing at once: a SIGSYS handler writes the call's number to
/// stderr, which ncu's output carries into the profile's skip reason, and exits 128 + SIGSYS. The
/// call itself never runs either way; the profiled kernel was already judged correct.
enum class filter_mode { candidate, profiled };

/// Installs the filter on the calling process and every thread it has (TSYNC). An error names why
/// libseccomp or the kernel refused.
status install_candidate_filter(filter_mode mode = filter_mode::candidate);

}  // namespace kforge::sandbox

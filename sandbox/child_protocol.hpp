#pragma once
// The line protocol between the sandbox supervisor (runner.hpp) and its two kinds of child, one
// JSON object per line over the child's fd 3 (common/child_process.hpp). Every reply has "ok";
// a failed one has "status" (a verdict name: runtime_error, hack_suspected, link_error,
// infra_error), "reason" (one line) and "fatal" (the child exits after replying: a sticky CUDA
// error leaves its context unusable).
//
// Every request carries a "nonce" that its reply echoes (child_options::reply_nonce): a line that
// candidate code writes on fd 3 cannot pass for the child's reply without reading the request out
// of the child's memory, and any byte beyond the one reply is a protocol error that condemns the
// candidate (hack_suspected) and the child.
//
// Candidate child (`kforge sandbox-child`, candidate_child.cpp): loads candidate libraries and
// calls them. It never sees an expected output.
//   hello                                  -> gpu (facts)
//   probe   {library, pid, seccomp}        -> runs the known-good kernel, checks it in-process;
//                                             then installs the seccomp filter unless seccomp is
//                                             false (seccomp_filter.hpp), and says so (seccomp);
//                                             pid: the child as the supervisor sees it (NVML may
//                                             report that PID);
//                                             leak_check: "process" (its own memory, by NVML)
//                                             or "device_free" (the GPU's, with leak_check_note)
//   load    {library, task}                -> dlopen + dlsym
//   check   {check, seed, variant, output_shapes, dir, ipc}
//                                          -> the NaN-poisoned call's outputs, after: inputs
//                                             unchanged, two calls with different poison agree;
//                                             with ipc: true as CUDA IPC handles (hex) of copies
//                                             in buffers the child keeps and reuses (the
//                                             reference server reads them on the GPU), else (or
//                                             when IPC fails) as files of raw bytes in dir
//   time    {seeds, fresh, final_seed, warmup, trials, slow_ms (optional), output_shapes, check,
//            dir, ipc}
//                                          -> event_ms[], wall_ms[] (primary shapes), last_seed,
//                                             staging_ms and delivery_ms (the time spent before
//                                             the calls and handing over the outputs, for the
//                                             runner's phases),
//                                             and the last trial's outputs as a check's (ipc or
//                                             files, numbered `check`). Before every call the
//                                             inputs of the next seed (rotating over `seeds`; with
//                                             fresh, seeds[i] for call i, drawn anew; the last
//                                             trial: final_seed's, drawn anew) are copied into
//                                             the same buffers and the outputs poisoned; with
//                                             slow_ms, fewer trials when the first slow_trials
//                                             each took longer than slow_ms
//   profile {seed, output_shapes}          -> one call on seed's primary inputs (drawn anew) between
//                                             cudaProfilerStart and cudaProfilerStop, for the
//                                             Nsight Compute that launched this child
//                                             (ncu_profiler.hpp); nothing handed over
//   unload                                 -> recycle (true: the child leaked device memory),
//                                             leak_check (as probe)
//
// Reference server (`kforge sandbox-ref`, reference_server.cpp): runs task references, keeps
// expected outputs per (task, seed, variant), compares, times the eager baseline. It never loads
// candidate code.
//   hello   {cache_bytes (optional)}       -> device facts (name, sm count, L2, memory, ...)
//   prepare {task, checks: [{seed, variant}]} -> output_shapes per check
//   compare {task, check: {seed, variant}, earlier: [{seed, variant}], ipc | files}
//                                          -> close, max_abs, max_rel, first_bad, bad_tensor,
//                                             stale (matches an earlier check's expected output);
//                                             bad_share (why) for handles no honest child sends
//                                             (count, format)
//   time    {task, seed, warmup, trials}   -> event_ms[]
#include <cstdint>
#include <exception>
#include <string>

#include <nlohmann/json.hpp>

#include "common/child_process.hpp"
#include "common/hex.hpp"

namespace kforge::sandbox::protocol {

/// Variant index on the wire for the primary shapes.
inline constexpr int primary = -1;

/// The check number a time reply's outputs are named by (output_file) where they travel as files.
inline constexpr int timed_check = 99;

/// Trials a candidate whose every trial exceeds the time request's slow_ms is timed in (runner.hpp:
/// run_options::slow_cutoff).
inline constexpr int slow_trials = 3;

/// GPU memory a GPU's reference servers may hold expected outputs in, all of them together: each
/// gets its share in hello's cache_bytes (a server not told keeps the whole).
inline constexpr std::int64_t expected_cache_bytes = std::int64_t{16} << 30;

/// An input set with its outputs this large (bytes) is large: a reference server releases torch's
/// cached blocks after touching one, and the runner tells the server when a candidate of a task
/// this large is done ({"op": "release"}), so that a set larger than the server's share goes then.
inline constexpr std::int64_t large_set_bytes = std::int64_t{256} << 20;

/// How a reference server's failure to read outputs over CUDA IPC begins: the runner then asks the
/// child for the same check again as files (IPC may not work on every host).
inline constexpr const char* ipc_unavailable = "outputs over CUDA IPC unavailable: ";
/// The leak check's name in probe and unload replies when it read the child's own device memory.
inline constexpr const char* own_usage_leak_check = "process";

/// Bytes as hex in the JSON lines (CUDA IPC handles travel this way): common/hex.hpp.
using ::kforge::from_hex;
using ::kforge::to_hex;

/// Name of the raw file holding output `index` of check `check` in a scratch directory.
inline std::string output_file(const std::string& dir, int check, int index) {
  return dir + "/check" + std::to_string(check) + "_out" + std::to_string(index) + ".bin";
}

/// A failed reply: `status` is a verdict name; `fatal` says the child exits after sending it.
inline nlohmann::json failure(const std::string& status, const std::string& reason,
                              bool fatal = false) {
  return {{"ok", false}, {"status", status}, {"reason", reason}, {"fatal", fatal}};
}

/// A child's main loop: each request line through `handle` (an exception becomes an infra_error
/// reply naming `who`), its reply written back. Returns the child's exit code: 0 when the
/// supervisor went away, 3 after a fatal reply, 1 when the reply could not be written.
template <class Handle>
int serve(const char* who, Handle&& handle) {
  control_channel channel;
  for (std::string line; channel.read(line);) {
    nlohmann::json reply;
    try {
      reply = handle(nlohmann::json::parse(line));
    } catch (const std::exception& e) {
      reply = failure("infra_error", std::string(who) + ": " + e.what());
    }
    if (const std::string nonce = request_nonce(line); !nonce.empty()) reply["nonce"] = nonce;
    if (!channel.write(reply.dump())) return 1;
    if (reply.value("fatal", false)) return 3;
  }
  return 0;
}

}  // namespace kforge::sandbox::protocol

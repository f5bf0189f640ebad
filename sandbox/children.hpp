#pragma once
// Entry points of the sandbox's child processes (`kforge sandbox-child`, `kforge sandbox-ref`),
// started by the supervisor (runner.hpp) with the control socket on fd 3. Protocol:
// child_protocol.hpp. In builds without CUDA both print why they cannot run and return 2.

namespace kforge::sandbox {

/// Loads and calls candidate libraries; never sees an expected output.
int candidate_child_main();

/// Runs references, keeps expected outputs, compares, times the eager baseline.
int reference_server_main();

}  // namespace kforge::sandbox

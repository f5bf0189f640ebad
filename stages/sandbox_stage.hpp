#pragma once
// The real sandbox behind the sandbox_worker actors (manifest: sandbox.backend = "nvcc"): a thin
// adapter from a Candidate message to sandbox::sandbox_pool (static checks, nvcc, and on the
// worker group's GPUs verification and timing) and back to a Verdict. One pool per process, shared
// by every worker thread in it, so the GPUs' candidate children and the compile cache are shared,
// and repeated kernels are judged once (sandbox.reuse_verdicts, stages/verdict_reuse.hpp).
#include <memory>

#include "actors/logic_interfaces.hpp"
#include "config/manifest.hpp"

namespace kforge::pipeline {

/// The process-wide real sandbox for `m` (created on first use; later calls share it). An error
/// when nvcc cannot be found or a GPU of the group does not work.
result<std::shared_ptr<actors::sandbox_logic>> shared_nvcc_sandbox(const manifest& m);

}  // namespace kforge::pipeline

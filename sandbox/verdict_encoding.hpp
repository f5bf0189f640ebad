#pragma once
// The sandbox's compile-stage outcomes as wire::Verdict fields (messages/rollout.fbs), so a worker
// can answer with a Verdict whichever stage decided it.

#include <memory>
#include <optional>

#include "messages/rollout_generated.h"
#include "sandbox/ncu_report.hpp"
#include "sandbox/compiler.hpp"
#include "sandbox/runner.hpp"
#include "sandbox/static_check.hpp"

namespace kforge::sandbox {

wire::VerdictStatus to_wire(compile_status s) noexcept;
wire::VerdictStatus to_wire(static_status s) noexcept;
wire::Severity to_wire(severity s) noexcept;

/// Sets status, reason, diagnostics and resources from a compile, and compile_ms to the time the
/// compile took this time (a cache hit costs only the lookup; the original nvcc time is in the
/// result). Diagnostics and resources replace what `v` held.
void encode_compile(const compile_result& r, wire::VerdictT& v);

/// Sets status and reason from a static check, and one diagnostic per finding (code: the rule's
/// name). For an ok check it sets status ok and leaves the rest alone.
void encode_static(const static_verdict& s, wire::VerdictT& v);

/// Sets status, reason, errors, timings, audit, output, check count and the profile (or why none)
/// from the run stage; keeps the compile's diagnostics and resources.
void encode_run(const run_outcome& r, wire::VerdictT& v);

/// A kernel profile as the verdict carries it, and back (nullopt: the verdict has none).
std::unique_ptr<wire::KernelProfileT> to_wire(const kernel_profile& p);
std::optional<kernel_profile> profile_of(const wire::VerdictT& v);

}  // namespace kforge::sandbox

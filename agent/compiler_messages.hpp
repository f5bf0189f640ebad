#pragma once
// One-line explanations of the compiler messages a kernel-writing model meets most, so an
// observation says what an error means and not only what nvcc printed (observation.hpp). Matched
// on the diagnostic's code where the tool gives a stable one, else on the message's wording.

#include <string>
#include <string_view>

namespace kforge::agent {

/// The explanation of a diagnostic with `code` and `message` (sandbox/diagnostics.hpp's fields),
/// or "" when none is known.
std::string explain_diagnostic(std::string_view code, std::string_view message);

}  // namespace kforge::agent

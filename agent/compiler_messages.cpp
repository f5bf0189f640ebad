#include "agent/compiler_messages.hpp"

#include <array>
#include <utility>

namespace kforge::agent {

namespace {

// (what the code or message holds, the explanation); the first match wins, so the more specific
// wordings come first.
constexpr std::array<std::pair<std::string_view, std::string_view>, 18> known = {{
    {"calling a __host__ function", "device code calls a host-only function: only __device__ functions run on the GPU"},
    {"calling a __device__ function", "host code calls a device-only function: launch a kernel instead"},
    {"is undefined", "a name that is not declared here: a typo, a missing #include, or a function defined after its use"},
    {"too few arguments in function call", "the call passes fewer arguments than the function takes"},
    {"too many arguments in function call", "the call passes more arguments than the function takes"},
    {"is incompatible with parameter of type", "an argument's type does not match its parameter (often const-ness, or a pointer and an integer mixed up)"},
    {"no instance of overloaded function", "no overload of the function takes these argument types"},
    {"no instance of function template", "the template cannot be instantiated with these argument types"},
    {"cannot be used to initialize", "the initializer's type does not convert to the variable's type"},
    {"has already been defined", "the same name is defined twice"},
    {"expression must have", "an operand has the wrong kind of type for its operator (e.g. a pointer where an integer is needed)"},
    {"expected a", "a syntax error: a ';', ')', '}' or similar is missing just before this point"},
    {"uses too much shared data", "static shared memory above the per-block limit: use less, or dynamic shared memory up to the opt-in limit"},
    {"too much shared data", "static shared memory above the per-block limit: use less, or dynamic shared memory up to the opt-in limit"},
    {"unresolved extern function", "a device function is declared but not defined in this file"},
    {"undefined reference to", "a function is declared but not defined in this file"},
    {"is not a member of", "the name does not exist in that class or namespace"},
    {"has no member", "the struct has no member of that name: kforge/kernel_abi.h lists kf_tensor's fields"},
}};

}  // namespace

std::string explain_diagnostic(std::string_view code, std::string_view message) {
  for (const auto& [what, why] : known)
    if (code == what || message.find(what) != std::string_view::npos) return std::string(why);
  return {};
}

}  // namespace kforge::agent

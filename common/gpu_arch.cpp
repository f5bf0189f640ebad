#include "common/gpu_arch.hpp"

#include <regex>

namespace kforge {

namespace {
// The families whose headline tensor-core instructions need the arch-specific target.
bool needs_arch_specific_target(int major) { return major >= 9 && major <= 11; }
}  // namespace

std::string arch_for_compute_capability(int major, int minor) {
  if (major <= 0 || minor < 0) return "";
  return "sm_" + std::to_string(major) + std::to_string(minor) +
         (needs_arch_specific_target(major) ? "a" : "");
}

bool valid_arch(const std::string& arch) {
  static const std::regex form(R"((sm|compute)_[0-9]+[af]?)");
  return std::regex_match(arch, form);
}

}  // namespace kforge

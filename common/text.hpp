#pragma once
// Small text helpers shared by the prompt, the chat format and the agent's observations.

#include <cctype>
#include <string_view>

namespace kforge {

/// `s` without leading and trailing white space (std::isspace); a view into `s`.
inline std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

}  // namespace kforge

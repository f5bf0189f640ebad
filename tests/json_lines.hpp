#pragma once
// JSON Lines files (tasks, samples, verdicts, sft records) as tests read them back.

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kforge::testing {

/// One parsed object per non-empty line of `p` (none when it cannot be opened).
inline std::vector<nlohmann::json> read_json_lines(const std::filesystem::path& p) {
  std::vector<nlohmann::json> v;
  std::ifstream f(p);
  std::string l;
  while (std::getline(f, l))
    if (!l.empty()) v.push_back(nlohmann::json::parse(l));
  return v;
}

}  // namespace kforge::testing

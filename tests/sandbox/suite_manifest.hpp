#pragma once
// The candidate suite's manifest (suite/suite.jsonl: one candidate, its built-in task and the
// verdict the sandbox should give it, a line), read by the CPU test (static checks and compile)
// and the GPU test (the whole sandbox). A malformed line fails the test with its number.
#include <doctest/doctest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/text_file.hpp"

namespace kforge::sandbox::testing {

inline const std::string suite_dir = std::string(KFORGE_TEST_DATA) + "/suite";

struct suite_entry {
  int line = 0;
  std::string file, task, why;
  std::vector<std::string> expect;  ///< one verdict, or the honest alternatives
  std::string rule;                 ///< for `rejected`: the rule of the first finding, if given
};

/// A candidate's source; empty when it cannot be read (its verdict then says so). No REQUIRE:
/// the tests call this from worker threads.
inline std::string read_file(const std::string& path) {
  auto text = kforge::read_text_file(path);
  return text ? *text : std::string();
}

// suite.jsonl, one object a line. Malformed lines fail the test with the line number.
inline std::vector<suite_entry> load_suite() {
  std::ifstream in(suite_dir + "/suite.jsonl");
  REQUIRE_MESSAGE(in.good(), "cannot read " << suite_dir << "/suite.jsonl");
  std::vector<suite_entry> entries;
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    INFO("suite.jsonl line " << n << ": " << line);
    const auto j = nlohmann::json::parse(line, nullptr, false);
    REQUIRE_FALSE(j.is_discarded());
    REQUIRE(j.is_object());
    for (const auto& [key, value] : j.items()) {
      (void)value;
      CHECK_MESSAGE((key == "file" || key == "task" || key == "expect" || key == "why" ||
                     key == "rule"),
                    "unknown key '" << key << "'");
    }
    REQUIRE(j.contains("file"));
    REQUIRE(j.contains("task"));
    REQUIRE(j.contains("expect"));
    REQUIRE(j.contains("why"));
    suite_entry e;
    e.line = n;
    e.file = j.at("file").get<std::string>();
    e.task = j.at("task").get<std::string>();
    e.why = j.at("why").get<std::string>();
    if (j.at("expect").is_string())
      e.expect = {j.at("expect").get<std::string>()};
    else
      e.expect = j.at("expect").get<std::vector<std::string>>();
    if (j.contains("rule")) e.rule = j.at("rule").get<std::string>();
    entries.push_back(std::move(e));
  }
  return entries;
}

}  // namespace kforge::sandbox::testing

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
  /// When set (> 0): an `ok` verdict may carry no speedup or one of at most this. For candidates
  /// whose timing a trick could inflate (caches, skipped work): the sandbox must not pay for it.
  double max_speedup = 0;
  /// Judged alone, after the others: a candidate that takes the GPU's memory would make the ones
  /// verified beside it fail to allocate their inputs (infra_error; docs/sandbox.md).
  bool alone = false;
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
                     key == "rule" || key == "max_speedup" || key == "alone"),
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
    e.alone = j.value("alone", false);
    if (j.contains("max_speedup")) {
      REQUIRE(j.at("max_speedup").is_number());
      e.max_speedup = j.at("max_speedup").get<double>();
      REQUIRE_MESSAGE(e.max_speedup > 0, "max_speedup must be positive");
    }
    entries.push_back(std::move(e));
  }
  return entries;
}

/// The confinement attack set (confinement/attacks.jsonl): candidates that attack the host and are
/// run with the static checks off, so that the OS confinement alone must stop them. Each is a
/// correct ReLU (task l1/relu) only if its attack failed.
inline const std::string confinement_dir = std::string(KFORGE_TEST_DATA) + "/confinement";

struct attack_entry {
  int line = 0;
  std::string file;
  std::string attack;  ///< a short name
  std::string marker;  ///< a path or process name that must not exist afterwards; may be empty
  std::string why;
};

inline std::vector<attack_entry> load_attacks() {
  std::ifstream in(confinement_dir + "/attacks.jsonl");
  REQUIRE_MESSAGE(in.good(), "cannot read " << confinement_dir << "/attacks.jsonl");
  std::vector<attack_entry> entries;
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    INFO("attacks.jsonl line " << n << ": " << line);
    const auto j = nlohmann::json::parse(line, nullptr, false);
    REQUIRE_FALSE(j.is_discarded());
    REQUIRE(j.is_object());
    for (const auto& [key, value] : j.items()) {
      CHECK_MESSAGE((key == "file" || key == "attack" || key == "marker" || key == "why"),
                    "unknown key '" << key << "'");
      CHECK_MESSAGE(value.is_string(), "'" << key << "' is not a string");
    }
    for (const char* key : {"file", "attack", "marker", "why"}) REQUIRE(j.contains(key));
    attack_entry e;
    e.line = n;
    e.file = j.at("file").get<std::string>();
    e.attack = j.at("attack").get<std::string>();
    e.marker = j.at("marker").get<std::string>();
    e.why = j.at("why").get<std::string>();
    entries.push_back(std::move(e));
  }
  return entries;
}

}  // namespace kforge::sandbox::testing

#pragma once
// Test tasks built as JSON: two float32 inputs x and y, one output z of the same shape, and one
// variant, with the reference source as the test needs it.
#include <doctest/doctest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tasks/task_parser.hpp"

namespace kforge::tasks::testing {

using json = nlohmann::json;

inline json two_input_task(const std::string& id, const std::string& description,
                           const std::string& source, const std::vector<std::int64_t>& shape,
                           const std::vector<std::int64_t>& variant) {
  auto in = [&](const char* name) {
    return json{{"name", name},
                {"shape", shape},
                {"dtype", "float32"},
                {"init", {{"dist", "normal"}, {"mean", 0.0}, {"std", 1.0}}}};
  };
  return json{{"id", id},
              {"category", "other"},
              {"description", description},
              {"inputs", {in("x"), in("y")}},
              {"outputs", {{{"name", "z"}, {"shape", shape}, {"dtype", "float32"}}}},
              {"reference", source},
              {"variants", {{{"x", variant}, {"y", variant}}}}};
}

/// Parses `j`; the test fails (with the parser's message) if it does not parse.
inline task parse_or_fail(const json& j) {
  auto t = parse_task(j.dump(), "test");
  REQUIRE_MESSAGE(t.ok(), (t.ok() ? "" : t.message()));
  return *t;
}

}  // namespace kforge::tasks::testing

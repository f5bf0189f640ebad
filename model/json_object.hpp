#pragma once
// Parsing a JSON document that must be an object, with errors that name where it came from:
// config.json, tokenizer.json and safetensors headers all start this way.
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/result.hpp"

namespace kforge::model {

/// `what` names the part of `source` that holds the JSON ("header " for a safetensors file,
/// empty for a whole file).
inline result<nlohmann::json> parse_json_object(std::string_view text, const std::string& source,
                                                const std::string& what = "") {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return error{source + ": " + what + (what.empty() ? "not" : "is not") + " valid JSON: " + e.what()};
  }
  if (!j.is_object())
    return error{source + ": " + what + (what.empty() ? "not" : "is not") + " a JSON object"};
  return j;
}

}  // namespace kforge::model

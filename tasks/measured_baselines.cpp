#include "tasks/measured_baselines.hpp"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

namespace kforge::tasks {

std::optional<double> measured_baseline::compile_over_eager() const {
  if (!ok || shapes != "primary" || !(eager_ms > 0) || !(compile_ms > 0)) return std::nullopt;
  return compile_ms / eager_ms;
}

std::vector<std::string> measured_baselines::devices() const {
  std::vector<std::string> out;
  for (const auto& l : lines)
    if (std::find(out.begin(), out.end(), l.device) == out.end()) out.push_back(l.device);
  return out;
}

std::map<std::string, double> measured_baselines::compile_ratios(const std::string& device) const {
  std::map<std::string, double> out;
  for (const auto& l : lines)
    if (l.device == device)
      if (auto r = l.compile_over_eager()) out[l.id] = *r;
  return out;
}

std::string measured_baselines::mode_of(const std::string& device) const {
  for (const auto& l : lines)
    if (l.device == device && !l.mode.empty()) return l.mode;
  return "";
}

std::string measured_baselines::torch_of(const std::string& device) const {
  for (const auto& l : lines)
    if (l.device == device) return l.torch;
  return "";
}

result<measured_baselines> read_measured_baselines(const std::string& path) {
  std::ifstream in(path);
  if (!in) return error{path + ": cannot read the baselines file"};
  measured_baselines out;
  out.file = path;
  std::map<std::pair<std::string, std::string>, int> seen;  // (device, id) -> line
  std::map<std::string, std::pair<std::string, int>> modes;  // device -> (mode, line)
  int n = 0;
  for (std::string text; std::getline(in, text);) {
    ++n;
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string at = path + ":" + std::to_string(n) + ": ";
    const auto j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return error{at + "not a JSON object"};
    measured_baseline b;
    try {
      b.id = j.at("id").get<std::string>();
      b.device = j.at("device").get<std::string>();
      b.ok = j.at("ok").get<bool>();
      b.torch = j.value("torch", "");
      if (j.contains("mode") && !j["mode"].is_null()) b.mode = j["mode"].get<std::string>();
      b.shapes = j.value("shapes", "primary");
      b.error = j.value("error", "");
      b.eager_ms = j.value("eager_ms", 0.0);
      b.compile_ms = j.value("compile_ms", 0.0);
      b.compile_s = j.value("compile_s", 0.0);
    } catch (const nlohmann::json::exception& e) {
      return error{at + "expected id and device (strings) and ok (true or false): " + e.what()};
    }
    if (b.ok && !(b.eager_ms > 0)) return error{at + "ok without a positive eager_ms"};
    if (!b.ok && b.error.empty()) return error{at + "not ok, and no error says why"};
    if (auto [it, fresh] = seen.emplace(std::make_pair(b.device, b.id), n); !fresh)
      return error{at + b.id + " on " + b.device + " again (first on line " + std::to_string(it->second) +
                   "): keep one measurement per task and device"};
    if (!b.mode.empty()) {
      auto [it, fresh] = modes.emplace(b.device, std::make_pair(b.mode, n));
      if (!fresh && it->second.first != b.mode)
        return error{at + "torch.compile mode " + b.mode + " on " + b.device + ", line " +
                     std::to_string(it->second.second) + " has " + it->second.first +
                     ": one mode per file (measure each mode into a file of its own)"};
    }
    out.lines.push_back(std::move(b));
  }
  return out;
}

}  // namespace kforge::tasks

#include "sandbox/eval_against_compile.hpp"

#include <cstdio>
#include <set>
#include <sstream>

#include "sandbox/eval_command.hpp"

namespace kforge::sandbox {

using json = nlohmann::json;

void add_speedup_vs_compile(json& v, const std::map<std::string, double>& ratios) {
  if (v.value("status", "") != "ok" || !v.contains("speedup")) return;
  const auto r = ratios.find(v.value("task", ""));
  if (r == ratios.end()) return;
  v["speedup_vs_compile"] = v["speedup"].get<double>() * r->second;
}

json against_compile(const std::vector<json>& verdicts, const tasks::measured_baselines& b,
                     const std::string& device) {
  json block{{"baselines", b.file}, {"device", device}, {"devices_in_file", b.devices()}};
  const auto ratios = device.empty() ? std::map<std::string, double>{} : b.compile_ratios(device);
  block["mode"] = b.mode_of(device);
  block["torch"] = b.torch_of(device);
  std::set<std::string> with, without;
  std::vector<json> vs_eager, vs_compile;
  for (const auto& v : verdicts) {
    const std::string task = v.value("task", "");
    if (!ratios.count(task)) {
      without.insert(task);
      continue;
    }
    with.insert(task);
    vs_eager.push_back(v);
    // The same line with its speedup over compile in the place summarize_verdicts reads.
    json c = v;
    add_speedup_vs_compile(c, ratios);
    if (c.contains("speedup_vs_compile"))
      c["speedup"] = c["speedup_vs_compile"];
    else
      c.erase("speedup");
    vs_compile.push_back(std::move(c));
  }
  block["tasks_with_compile_time"] = with.size();
  block["tasks_without_compile_time"] = without.size();
  block["without"] = json(std::vector<std::string>(without.begin(), without.end()));
  block["vs_eager"] = summarize_verdicts(vs_eager);
  block["vs_compile"] = summarize_verdicts(vs_compile);
  return block;
}

std::string format_against_compile(const json& block) {
  std::ostringstream os;
  const auto device = block.value("device", "");
  const auto with = block.value("tasks_with_compile_time", 0);
  const auto without = block.value("tasks_without_compile_time", 0);
  os << "against torch.compile (" << block.value("baselines", "") << "): ";
  if (device.empty()) {
    os << "no GPU ran, so no speedups to rescale\n";
    return os.str();
  }
  os << with << " task(s) have a compile time measured on " << device;
  if (with > 0) os << " (mode " << block.value("mode", "") << ", torch " << block.value("torch", "") << ")";
  os << "; " << without << " lack one";
  if (without > 0) {
    const auto& ids = block.at("without");
    os << " (e.g. " << ids.front().get<std::string>() << ")";
  }
  if (with == 0) {
    os << "; the file holds devices:";
    for (const auto& d : block.at("devices_in_file")) os << " \"" << d.get<std::string>() << "\"";
    os << "\n";
    return os.str();
  }
  os << "\n";
  auto column = [&](const char* label, const json& s) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "  vs %-7s geomean %.3fx, per task fast_p best of samples:", label,
                  s.at("geomean_speedup").get<double>());
    os << buf;
    for (const auto& [k, v] : s.at("per_task").at("fast_p_best_of_samples").items()) {
      std::snprintf(buf, sizeof buf, " %s=%.3f", k.c_str(), v.get<double>());
      os << buf;
    }
    os << "; mean over samples:";
    for (const auto& [k, v] : s.at("per_task").at("fast_p_mean_over_samples").items()) {
      std::snprintf(buf, sizeof buf, " %s=%.3f", k.c_str(), v.get<double>());
      os << buf;
    }
    os << "\n";
  };
  column("eager", block.at("vs_eager"));
  column("compile", block.at("vs_compile"));
  return os.str();
}

}  // namespace kforge::sandbox

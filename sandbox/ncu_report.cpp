#include "sandbox/ncu_report.hpp"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>
#include <regex>
#include <string>

namespace kforge::sandbox {

namespace {

/// One CSV record's fields: quoted ("" for a quote inside) or bare, separated by commas.
std::vector<std::string> csv_fields(std::string_view line) {
  std::vector<std::string> out;
  std::string cur;
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') cur += line[++i];
      else if (c == '"') quoted = false;
      else cur += c;
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.push_back(std::move(cur));
      cur.clear();
    } else if (c != '\r') {
      cur += c;
    }
  }
  out.push_back(std::move(cur));
  return out;
}

/// "57,120" -> 57120 (ncu groups thousands with commas); nullopt for anything else.
std::optional<double> number(std::string s) {
  s.erase(std::remove(s.begin(), s.end(), ','), s.end());
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || *end != '\0') return std::nullopt;
  return v;
}

/// A duration in microseconds from ncu's value and unit.
std::optional<double> microseconds(const std::string& value, const std::string& unit) {
  const auto v = number(value);
  if (!v) return std::nullopt;
  if (unit == "ns" || unit == "nsecond") return *v / 1000;
  if (unit == "us" || unit == "usecond") return *v;
  if (unit == "ms" || unit == "msecond") return *v * 1000;
  if (unit == "s" || unit == "second") return *v * 1e6;
  return std::nullopt;
}

/// The stall a CPIStall rule names ("spends 34.8 cycles being stalled waiting for a scoreboard
/// dependency on a L1TEX (...) operation. ... represents about 81.9% of the total ...") and its
/// share; nullopt for its other rules.
std::optional<std::pair<std::string, double>> stall_of(const std::string& text) {
  static const std::regex what(R"(being stalled (.+?)\. )");
  static const std::regex share(R"(represents about ([0-9.]+)%)");
  std::smatch w, s;
  if (!std::regex_search(text, w, what) || !std::regex_search(text, s, share)) return std::nullopt;
  return std::make_pair(w[1].str(), std::strtod(s[1].str().c_str(), nullptr));
}

}  // namespace

result<std::vector<kernel_profile>> parse_ncu_csv(std::string_view csv) {
  std::vector<std::string> header;
  std::map<std::string, kernel_profile> by_id;
  std::vector<std::string> order;
  std::map<std::string, bool> timed;
  std::size_t pos = 0;
  while (pos < csv.size()) {
    const auto end = std::min(csv.find('\n', pos), csv.size());
    const auto line = csv.substr(pos, end - pos);
    pos = end + 1;
    if (header.empty()) {
      if (line.rfind("\"ID\",", 0) == 0) header = csv_fields(line);
      continue;
    }
    const auto f = csv_fields(line);
    if (f.size() < 2) continue;
    // A metric's row leaves the rule columns out; a rule's row, the metric's.
    std::map<std::string, std::string> row;
    for (std::size_t i = 0; i < header.size() && i < f.size(); ++i) row[header[i]] = f[i];
    const auto id = row["ID"];
    if (!by_id.count(id)) order.push_back(id);
    auto& p = by_id[id];
    p.kernel = row["Kernel Name"];
    const auto& metric = row["Metric Name"];
    const auto value = number(row["Metric Value"]);
    if (metric == "Duration") {
      if (const auto us = microseconds(row["Metric Value"], row["Metric Unit"])) {
        p.duration_us = *us;
        timed[id] = true;
      }
    } else if (metric == "Achieved Occupancy" && value) {
      p.achieved_occupancy_pct = *value;
    } else if (metric == "DRAM Throughput" && value) {
      p.dram_throughput_pct = *value;
    } else if (metric == "Compute (SM) Throughput" && value) {
      p.sm_throughput_pct = *value;
    } else if (row["Rule Name"] == "CPIStall") {
      if (auto s = stall_of(row["Rule Description"])) p.stalls.push_back(std::move(*s));
    }
  }
  if (header.empty()) return error{"ncu report: no CSV header (\"ID\",...): not `ncu --csv` output"};
  std::vector<kernel_profile> out;
  for (const auto& id : order) {
    if (!timed[id]) return error{"ncu report: launch " + id + " (" + by_id[id].kernel + ") has no Duration"};
    auto& p = by_id[id];
    std::sort(p.stalls.begin(), p.stalls.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    out.push_back(std::move(p));
  }
  return out;
}

result<kernel_profile> slowest_kernel(std::string_view csv) {
  auto all = parse_ncu_csv(csv);
  if (!all) return all.err();
  if (all->empty()) return error{"ncu report: no kernel was profiled"};
  return *std::max_element(all->begin(), all->end(),
                           [](const auto& a, const auto& b) { return a.duration_us < b.duration_us; });
}

}  // namespace kforge::sandbox

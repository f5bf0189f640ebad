#include "report/report_data.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <toml++/toml.h>

#include "common/text_file.hpp"

namespace kforge::pipeline {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

/// "FILE:LINE: what" (line 0: no line).
error at(const fs::path& file, std::size_t line, const std::string& what) {
  return error{file.string() + (line ? ":" + std::to_string(line) : std::string()) + ": " + what};
}

result<json> parse_json(const std::string& text, const fs::path& file, std::size_t line) {
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    return at(file, line, std::string("not valid JSON (") + e.what() + ")");
  }
}

/// Calls `each(line_number, json)` for every non-blank line of a JSON Lines file.
template <class F>
status read_lines(const fs::path& file, F&& each) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return at(file, 0, "cannot read");
  std::string line;
  for (std::size_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto j = parse_json(line, file, n);
    if (!j) return j.err();
    if (!j->is_object()) return at(file, n, "not a JSON object");
    if (auto s = each(n, *j); !s) return s;
  }
  if (in.bad()) return at(file, 0, "cannot read");
  return {};
}

/// A counter: absent is 0; anything but a non-negative integer is an error.
status counter(const json& j, const char* key, std::uint64_t& out, const fs::path& file,
               std::size_t n) {
  if (!j.contains(key)) return {};
  if (!j[key].is_number_unsigned())
    return at(file, n, std::string("field \"") + key + "\": not a non-negative integer");
  out = j[key].get<std::uint64_t>();
  return {};
}

status text_field(const json& j, const char* key, std::string& out, const fs::path& file,
                  std::size_t n, bool required) {
  if (!j.contains(key)) {
    if (required) return at(file, n, std::string("field \"") + key + "\": missing");
    return {};
  }
  if (!j[key].is_string()) return at(file, n, std::string("field \"") + key + "\": not a string");
  out = j[key].get<std::string>();
  return {};
}

result<std::vector<metrics_row>> read_metrics(const fs::path& file) {
  std::vector<metrics_row> rows;
  auto s = read_lines(file, [&](std::size_t n, const json& j) -> status {
    metrics_row r;
    if (!j.contains("t") || !j["t"].is_number())
      return at(file, n, "field \"t\": missing or not a number");
    r.t = j["t"].get<double>();
    for (auto [key, out, req] :
         {std::tuple{"stage", &r.stage, true}, std::tuple{"kind", &r.kind, true},
          std::tuple{"process", &r.process, false}})
      if (auto e = text_field(j, key, *out, file, n, req); !e) return e;
    for (auto [key, out] : {std::pair{"received", &r.received}, std::pair{"sent", &r.sent},
                            std::pair{"dropped", &r.dropped}, std::pair{"errors", &r.errors},
                            std::pair{"queue_depth", &r.queue_depth}})
      if (auto e = counter(j, key, *out, file, n); !e) return e;
    if (j.contains("extra")) {
      if (!j["extra"].is_object()) return at(file, n, "field \"extra\": not an object");
      for (const auto& [k, v] : j["extra"].items()) {
        if (!v.is_number_unsigned())
          return at(file, n, "field \"extra." + k + "\": not a non-negative integer");
        r.extra[k] = v.get<std::uint64_t>();
      }
    }
    rows.push_back(std::move(r));
    return {};
  });
  if (!s) return s.err();
  return rows;
}

status read_train(const fs::path& file, run_data& d) {
  std::vector<train_row> rows;
  double last_step = -1;
  auto s = read_lines(file, [&](std::size_t n, const json& j) -> status {
    if (!j.contains("step") || !j["step"].is_number())
      return at(file, n, "field \"step\": missing or not a number");
    train_row r;
    for (const auto& [k, v] : j.items())
      if (v.is_number()) r[k] = v.get<double>();
    // train.jsonl is appended to: steps starting over mean a new run into the same directory.
    if (r["step"] <= last_step) {
      d.train_earlier += rows.size();
      rows.clear();
    }
    last_step = r["step"];
    rows.push_back(std::move(r));
    return {};
  });
  if (!s) return s;
  d.train = std::move(rows);
  return {};
}

result<std::string> run_name(const std::string& text, const fs::path& file) {
  const std::string source = file.string();
  toml::table root;
#if TOML_EXCEPTIONS
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    return at(file, e.source().begin.line, "TOML syntax error: " + std::string(e.description()));
  }
#else
  auto parsed = toml::parse(text, source);
  if (!parsed)
    return at(file, parsed.error().source().begin.line,
              "TOML syntax error: " + std::string(parsed.error().description()));
  root = std::move(parsed).table();
#endif
  return std::string(root["run"]["name"].value_or(std::string_view()));
}

status read_best(const fs::path& dir, run_data& d) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return {};
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const auto& p = entry.path();
    if (p.extension() != ".json" || !entry.is_regular_file(ec)) continue;
    auto text = read_text_file(p.string());
    if (!text) return text.err();
    auto j = parse_json(*text, p, 0);
    if (!j) return j.err();
    if (!j->is_object()) return at(p, 0, "not a JSON object");
    best_kernel_row b;
    b.json_path = p.string();
    if (auto s = text_field(*j, "task", b.task, p, 0, true); !s) return s;
    for (auto [key, out] :
         {std::pair{"speedup", &b.speedup}, std::pair{"candidate_ms", &b.candidate_ms},
          std::pair{"baseline_ms", &b.baseline_ms}}) {
      if (!j->contains(key)) continue;
      if (!(*j)[key].is_number())
        return at(p, 0, std::string("field \"") + key + "\": not a number");
      *out = (*j)[key].get<double>();
    }
    if (auto s = counter(*j, "policy_version", b.policy_version, p, 0); !s) return s;
    if (j->contains("verdict") && (*j)["verdict"].is_object())
      b.audit = (*j)["verdict"].value("audit", std::string());
    std::string source;
    if (auto s = text_field(*j, "source", source, p, 0, false); !s) return s;
    if (!source.empty() && fs::is_regular_file(dir / source, ec))
      b.source_path = (dir / source).string();
    d.best.push_back(std::move(b));
  }
  if (ec) return at(dir, 0, "cannot list: " + ec.message());
  std::sort(d.best.begin(), d.best.end(),
            [](const auto& a, const auto& b) { return a.task < b.task; });
  return {};
}

}  // namespace

result<run_data> load_run(const std::string& dir_name) {
  const fs::path dir(dir_name);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return error{dir_name + ": not a run directory (no such folder)"};
  run_data d;
  d.dir = dir_name;
  d.name = fs::absolute(dir, ec).lexically_normal().filename().string();

  const auto manifest = dir / "manifest.toml";
  if (fs::exists(manifest, ec)) {
    auto text = read_text_file(manifest.string());
    if (!text) return text.err();
    auto name = run_name(*text, manifest);
    if (!name) return name.err();
    if (!name->empty()) d.name = *name;
    d.manifest_text = std::move(*text);
  }
  const auto summary = dir / "summary.json";
  if (fs::exists(summary, ec)) {
    auto text = read_text_file(summary.string());
    if (!text) return text.err();
    auto j = parse_json(*text, summary, 0);
    if (!j) return j.err();
    if (!j->is_object()) return at(summary, 0, "not a JSON object");
    d.summary = std::move(*j);
  }
  if (const auto metrics = dir / "metrics.jsonl"; fs::exists(metrics, ec)) {
    auto rows = read_metrics(metrics);
    if (!rows) return rows.err();
    d.metrics = std::move(*rows);
  }
  if (const auto train = dir / "train.jsonl"; fs::exists(train, ec))
    if (auto s = read_train(train, d); !s) return s.err();
  if (auto s = read_best(dir / "best", d); !s) return s.err();
  auto verdicts = read_verdict_tally(dir_name);
  if (!verdicts) return verdicts.err();
  d.verdicts = std::move(*verdicts);
  return d;
}

}  // namespace kforge::pipeline

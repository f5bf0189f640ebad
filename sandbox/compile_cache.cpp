#include "sandbox/compile_cache.hpp"

#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace kforge::sandbox {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr compile_status all_statuses[] = {
    compile_status::ok,       compile_status::compile_error, compile_status::link_error,
    compile_status::rejected, compile_status::timeout,       compile_status::infra_error};
constexpr severity all_levels[] = {severity::error, severity::warning, severity::note};

std::string_view level_name(severity s) {
  switch (s) {
    case severity::error:
      return "error";
    case severity::warning:
      return "warning";
    case severity::note:
      return "note";
  }
  return "error";
}

std::optional<std::string> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return std::nullopt;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

std::string to_json(const compile_result& r) {
  json j;
  j["status"] = std::string(status_name(r.status));
  j["reason"] = r.reason;
  j["diagnostics"] = json::array();
  for (const auto& d : r.diagnostics)
    j["diagnostics"].push_back({{"line", d.line},
                                {"column", d.column},
                                {"severity", std::string(level_name(d.level))},
                                {"code", d.code},
                                {"message", d.message}});
  j["resources"] = json::array();
  for (const auto& u : r.resources)
    j["resources"].push_back({{"kernel", u.kernel},
                              {"registers", u.registers},
                              {"shared_bytes", u.shared_bytes},
                              {"spill_store_bytes", u.spill_store_bytes},
                              {"spill_load_bytes", u.spill_load_bytes},
                              {"stack_bytes", u.stack_bytes}});
  j["log"] = r.log;
  j["nvcc_ms"] = r.nvcc_ms;
  j["has_library"] = !r.library.empty();
  // Invalid UTF-8 in nvcc's output (a candidate's bytes echoed back) must not fail the store.
  return j.dump(1, ' ', false, json::error_handler_t::replace);
}

result<compile_result> compile_result_from_json(std::string_view text) {
  const json j = json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return error{"result.json: not a JSON object"};
  try {
    compile_result r;
    const std::string st = j.at("status").get<std::string>();
    bool known = false;
    for (auto s : all_statuses)
      if (status_name(s) == st) r.status = s, known = true;
    if (!known) return error{"result.json: field status: unknown value \"" + st + "\""};
    r.reason = j.at("reason").get<std::string>();
    for (const auto& d : j.at("diagnostics")) {
      diagnostic x;
      x.line = d.at("line").get<int>();
      x.column = d.at("column").get<int>();
      const std::string lv = d.at("severity").get<std::string>();
      for (auto s : all_levels)
        if (level_name(s) == lv) x.level = s;
      x.code = d.at("code").get<std::string>();
      x.message = d.at("message").get<std::string>();
      r.diagnostics.push_back(std::move(x));
    }
    for (const auto& u : j.at("resources")) {
      resource_usage x;
      x.kernel = u.at("kernel").get<std::string>();
      x.registers = u.at("registers").get<int>();
      x.shared_bytes = u.at("shared_bytes").get<std::int64_t>();
      x.spill_store_bytes = u.at("spill_store_bytes").get<std::int64_t>();
      x.spill_load_bytes = u.at("spill_load_bytes").get<std::int64_t>();
      x.stack_bytes = u.at("stack_bytes").get<std::int64_t>();
      r.resources.push_back(std::move(x));
    }
    r.log = j.at("log").get<std::string>();
    r.nvcc_ms = j.at("nvcc_ms").get<double>();
    if (j.at("has_library").get<bool>()) r.library = "kernel.so";  // made absolute by the caller
    return r;
  } catch (const json::exception& e) {  // a field missing or of the wrong type
    return error{std::string("result.json: ") + e.what()};
  }
}

std::optional<compile_result> compile_cache::find(const std::string& key,
                                                  std::string_view source) const {
  const std::string entry = entry_path(key);
  const auto stored_source = read_file(entry + "/candidate.cu");
  if (!stored_source || *stored_source != source) return std::nullopt;  // absent, or a collision
  const auto text = read_file(entry + "/result.json");
  if (!text) return std::nullopt;
  auto r = compile_result_from_json(*text);
  if (!r) return std::nullopt;
  if (!r->library.empty()) {
    r->library = entry + "/kernel.so";
    if (::access(r->library.c_str(), R_OK) != 0) return std::nullopt;
  }
  r->cache_hit = true;
  r->cache_key = key;
  return std::move(r.value());
}

bool compile_cache::cacheable(const compile_result& r) {
  switch (r.status) {
    case compile_status::ok:
    case compile_status::link_error:
    case compile_status::rejected:
      return true;
    case compile_status::compile_error: {
      // Running out of memory or file size depends on the limits, not only on the source.
      if (r.reason.find("ran out of memory") != std::string::npos ||
          r.reason.find("file size limit") != std::string::npos ||
          r.reason.find("killed by signal") != std::string::npos)
        return false;
      // Only an error nvcc pins on a line of the source is the source's fault for sure. Others
      // ("Could not open output file", a full disk) come from the machine and must not be
      // replayed to every later copy of this source.
      return std::any_of(r.diagnostics.begin(), r.diagnostics.end(), [](const diagnostic& d) {
        return d.level == severity::error && d.line > 0;
      });
    }
    case compile_status::timeout:
    case compile_status::infra_error:
      return false;
  }
  return false;
}

result<bool> compile_cache::publish(const std::string& key, std::string_view source,
                                    const std::string& staging, const compile_result& r) const {
  {
    std::ofstream f(staging + "/result.json", std::ios::binary);
    f << to_json(r);
    if (!f) return error{"cannot write " + staging + "/result.json"};
  }
  const std::string entry = entry_path(key);
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (::rename(staging.c_str(), entry.c_str()) == 0) return true;
    if (errno != EEXIST && errno != ENOTEMPTY)
      return error{"cannot move " + staging + " to " + entry + ": " + std::strerror(errno)};
    // Someone stored this key first. Their entry wins if it is whole; a broken one (a disk error,
    // a hand edit) is moved aside and replaced.
    if (find(key, source)) return false;
    std::error_code ec;
    const std::string trash = staging + ".broken";
    if (::rename(entry.c_str(), trash.c_str()) == 0) fs::remove_all(trash, ec);
  }
  return error{"cannot replace the broken cache entry " + entry};
}

}  // namespace kforge::sandbox

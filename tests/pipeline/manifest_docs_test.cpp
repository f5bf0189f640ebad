// docs/manifest.md against the manifest reader: every key the reader accepts is documented, and every
// documented key is one the reader accepts.
//
// The reader's keys are asked of the reader itself, not kept by hand: a table holding an unknown key
// `zz_probe` is refused with "unknown key (known here: a, b, ...)", which lists every key that
// table's reader asks for (config/toml_reader.cpp, table_reader::finish). Each key found is then
// probed as a table of its own, so a new sub-table is found too. The other refusals say what a
// table holds instead: "unknown link (known: ...)" ([endpoints]), "unknown actor kind (known: ...)"
// ([process.actors]), and any other complaint about `zz_probe` itself means the table takes names
// of the user's choosing ([gpu_groups]: documented as `gpu_groups.<name>`).
//
// The documented keys are the first cells of docs/manifest.md's table rows written as
// "| `table.key` |" ("<kind>" stands for any actor kind, "<name>" for a name of the user's).

#include <doctest/doctest.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "config/manifest.hpp"

using namespace kforge::pipeline;

namespace {

constexpr const char* probe_key = "zz_probe";
constexpr const char* kind_placeholder = "<kind>";
constexpr const char* name_placeholder = "<name>";
// The actor kind the probes of "process.actors.<kind>" are written with.
constexpr const char* probe_kind = "sampler";

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (std::size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

// Manifest text that puts `zz_probe = 1` into the table at `path` ("" for the root).
std::string probe_text(const std::string& path) {
  const std::string header = replace_all(path, kind_placeholder, probe_kind);
  if (path.empty()) return std::string(probe_key) + " = 1\n";
  if (path == "process") return "[[process]]\n" + std::string(probe_key) + " = 1\n";
  if (path.rfind("process.", 0) == 0)
    return "[[process]]\n[" + header + "]\n" + probe_key + " = 1\n";
  return "[" + header + "]\n" + probe_key + " = 1\n";
}

// The reader's message about `path`.zz_probe, with the key normalised ("process[0]" -> "process",
// an actor kind -> "<kind>"); empty when it said nothing about it.
std::string probe_reason(const std::string& path) {
  const auto m = parse_manifest(probe_text(path), "probe");
  if (m.ok()) return "";
  std::string text = replace_all(m.message(), "process[0]", "process");
  for (auto k : all_actor_kinds)
    text = replace_all(text, "process.actors." + std::string(to_string(k)) + ".",
                       std::string("process.actors.") + kind_placeholder + ".");
  const std::string key = " " + (path.empty() ? std::string() : path + ".") + probe_key + ": ";
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);)
    if (const auto at = line.find(key); at != std::string::npos) return line.substr(at + key.size());
  return "";
}

std::vector<std::string> split_list(const std::string& list) {
  std::vector<std::string> out;
  std::istringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    const auto b = item.find_first_not_of(' ');
    if (b != std::string::npos) out.push_back(item.substr(b));
  }
  return out;
}

std::string join(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}

// Every key path the reader accepts, found by probing from the root.
std::set<std::string> reader_keys() {
  std::set<std::string> keys;
  std::vector<std::string> tables{""};
  std::set<std::string> probed;
  static const std::regex known_keys(R"(^unknown key \(known here: (.*)\)$)");
  static const std::regex known_other(R"(^unknown (link|actor kind) \(known: (.*)\)$)");
  while (!tables.empty()) {
    const std::string path = tables.back();
    tables.pop_back();
    if (!probed.insert(path).second) continue;
    const std::string reason = probe_reason(path);
    std::smatch m;
    if (std::regex_match(reason, m, known_keys)) {
      for (const auto& k : split_list(m[1].str())) {
        keys.insert(join(path, k));
        tables.push_back(join(path, k));  // a sub-table answers the probe; a value does not
      }
    } else if (std::regex_match(reason, m, known_other)) {
      for (const auto& k : split_list(m[2].str())) keys.insert(join(path, k));
      if (m[1].str() == "actor kind") tables.push_back(join(path, kind_placeholder));
    } else if (!reason.empty() && !path.empty()) {
      keys.insert(join(path, name_placeholder));  // zz_probe was taken as a name and judged
    }
  }
  return keys;
}

std::set<std::string> documented_keys(const std::string& file) {
  std::ifstream in(file);
  REQUIRE_MESSAGE(in.good(), "cannot read " << file);
  std::set<std::string> keys;
  static const std::regex row(R"(^\|\s*`([^`]+)`\s*\|)");
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, row)) keys.insert(m[1].str());
  }
  return keys;
}

}  // namespace

TEST_CASE("the manifest reader's keys are found by probing it") {
  const auto keys = reader_keys();
  // The probing itself works: keys of every kind of table are found.
  for (const char* k : {"run", "run.steps", "tasks.gpu", "tasks.gpu.sm_count", "sandbox.trials",
                        "trainer.publish_timeout_s", "record.links", "process.head",
                        "process.actors.trainer", "process.actors.<kind>.gpu_group",
                        "endpoints.feedback", "gpu_groups.<name>"})
    CHECK_MESSAGE(keys.count(k) == 1, k);
  CHECK(keys.count("run.steps.zz_probe") == 0);
  CHECK(keys.count("run.<name>") == 0);
}

TEST_CASE("docs/manifest.md documents exactly the keys the manifest reader accepts") {
  const std::string doc = std::string(KFORGE_SOURCE_DIR) + "/docs/manifest.md";
  const auto reader = reader_keys();
  const auto documented = documented_keys(doc);
  REQUIRE(!reader.empty());
  for (const auto& k : reader)
    CHECK_MESSAGE(documented.count(k) == 1,
                  "the manifest reader accepts `" << k << "`, which " << doc
                                                  << " does not document (add a row \"| `" << k << "` | ...\")");
  for (const auto& k : documented)
    CHECK_MESSAGE(reader.count(k) == 1,
                  doc << " documents `" << k << "`, which the manifest reader does not accept");
}

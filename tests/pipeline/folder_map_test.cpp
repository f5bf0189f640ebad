// docs/architecture.md's folder map against the tree: every top-level folder of the repository has a
// row and every row names a folder that exists, and no source folder holds more than a fifth of the
// non-test code (a layout by role: one folder that grows past that is holding several roles).
//
// Left out of both: build folders, runs/ (run directories) and hidden folders other than .ci/,
// none of which a clone holds.

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

namespace fs = std::filesystem;

namespace {

const fs::path root = KFORGE_SOURCE_DIR;

bool in_a_clone(const std::string& name) {
  if (name == "runs" || name.rfind("build", 0) == 0) return false;
  return name[0] != '.' || name == ".ci";
}

std::set<std::string> folders_on_disk() {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(root))
    if (e.is_directory() && in_a_clone(e.path().filename().string()))
      out.insert(e.path().filename().string());
  return out;
}

// The first cells of the rows under "## Folder map", written as "| `name/` |".
std::set<std::string> folders_in_map() {
  std::ifstream in(root / "docs" / "architecture.md");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const auto at = text.find("## Folder map");
  REQUIRE(at != std::string::npos);
  const std::string section = text.substr(at, text.find("\n## ", at + 1) - at);
  std::set<std::string> out;
  const std::regex row(R"(\n\| `([^`/]+)/` \|)");
  for (std::sregex_iterator it(section.begin(), section.end(), row), end; it != end; ++it)
    out.insert((*it)[1].str());
  return out;
}

std::size_t source_lines(const fs::path& dir) {
  std::size_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    const auto ext = e.path().extension().string();
    if (!e.is_regular_file() || (ext != ".cpp" && ext != ".hpp" && ext != ".h" && ext != ".cu"))
      continue;
    std::ifstream in(e.path());
    for (std::string line; std::getline(in, line);) ++n;
  }
  return n;
}

}  // namespace

TEST_CASE("docs/architecture.md's folder map names every top-level folder, and only those") {
  const auto disk = folders_on_disk();
  const auto map = folders_in_map();
  for (const auto& f : disk) CHECK_MESSAGE(map.count(f), f << "/ is not in the folder map");
  for (const auto& f : map) CHECK_MESSAGE(disk.count(f), f << "/ is in the folder map but not in the tree");
}

TEST_CASE("no source folder holds more than a fifth of the non-test code") {
  std::map<std::string, std::size_t> lines;
  std::size_t total = 0;
  for (const auto& f : folders_on_disk()) {
    if (f == "tests") continue;
    total += lines[f] = source_lines(root / f);
  }
  REQUIRE(total > 0);
  for (const auto& [f, n] : lines)
    CHECK_MESSAGE(n * 5 <= total, f << "/ holds " << n << " of " << total << " lines of non-test code");
}

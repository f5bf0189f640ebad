#include "sandbox/scratch_dir.hpp"

#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

namespace kforge::sandbox {

namespace fs = std::filesystem;

result<std::shared_ptr<scratch_dir>> scratch_dir::create(const std::string& root,
                                                         const std::string& prefix) {
  std::error_code ec;
  const fs::path base = root.empty() ? fs::temp_directory_path(ec) : fs::path(root);
  if (ec) return error{"no temporary directory: " + ec.message()};
  fs::create_directories(base, ec);
  const std::string templ = (base / (prefix + "XXXXXX")).string();
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr)  // mkdtemp creates it with mode 0700
    return error{"cannot create a private directory under " + base.string() + ": " +
                 std::strerror(errno)};
  return std::shared_ptr<scratch_dir>(new scratch_dir(buf.data()));
}

scratch_dir::~scratch_dir() {
  if (path_.empty()) return;
  std::error_code ec;
  fs::remove_all(path_, ec);  // best effort: a leftover temp dir is not worth a crash
}

}  // namespace kforge::sandbox

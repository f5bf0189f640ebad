#pragma once
// A whole file as a string, or "PATH: cannot read" — for readers of model files, tasks and
// candidates that then parse and report errors of their own; and the matching writer that never
// leaves a reader half a file.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "common/result.hpp"

namespace kforge {

inline result<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return error{path + ": cannot read"};
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return error{path + ": cannot read"};
  return ss.str();
}

/// Writes `text` to `path` through a temporary file in the same directory and a rename, so a
/// reader sees the old file or the whole new one. On error nothing is left behind but the old file.
inline status write_text_file_atomically(const std::string& path, const std::string& text) {
  namespace fs = std::filesystem;
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  std::error_code ec;
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << text;
    f.flush();
    if (!f) {
      fs::remove(tmp, ec);
      return error{tmp + ": cannot write"};
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return error{path + ": cannot rename the written file into place: " + ec.message()};
  }
  return {};
}

}  // namespace kforge

#pragma once
// A whole file as a string, or "PATH: cannot read" — for readers of model files, tasks and
// candidates that then parse and report errors of their own.
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

}  // namespace kforge

#pragma once
// A whole file as a string, or "PATH: cannot read" — for readers of model files, tasks and
// candidates that then parse and report errors of their own; and the matching writer that never
// leaves a reader half a file.
#include <fstream>
#include <sstream>
#include <string>

#include "common/file_writer.hpp"
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

/// The last non-empty line of the text file `path` ("" when there is none or it cannot be read):
/// a child's log ends with why it stopped.
inline std::string last_line_of(const std::string& path) {
  std::ifstream in(path);
  std::string last;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) last = line;
  return last;
}

/// Writes `text` to `path` through a temporary file in the same directory, synced, and a rename,
/// so a reader sees the old file or the whole new one. On error nothing is left behind but the old
/// file; the error names the file and the reason.
inline status write_text_file_atomically(const std::string& path, const std::string& text) {
  return write_file_atomically(path, text);
}

}  // namespace kforge

#pragma once
// `kforge inspect FILE`: a recording as JSON lines, one envelope per line.

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>

namespace kforge::pipeline {

struct inspect_options {
  std::string file;
  std::optional<std::string> payload;  ///< only envelopes of this payload type ("Candidate", ...)
  std::uint64_t limit = 0;             ///< 0 = all
  bool header = false;                 ///< print the recording header as the first line
};

/// Returns the process exit code: 0 when the whole file was read, 1 when it is unreadable or
/// broken part-way (what came before is still printed; the error names file and offset).
int inspect(const inspect_options& opt, std::ostream& out, std::ostream& err);

}  // namespace kforge::pipeline

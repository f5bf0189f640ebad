#pragma once
// nvcc's output turned into data the model can read back: diagnostics (line, column, severity,
// code, message) from every tool nvcc drives — the EDG front end (cudafe/cicc), the host
// compiler, ptxas, the assembler, nvlink and ld — and ptxas resource usage per kernel
// (`-Xptxas -v`).
// Pure functions on strings, so they are unit-tested on captured output.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kforge::sandbox {

enum class severity { error, warning, note };

struct diagnostic {
  int line = 0;    ///< 1-based line in the candidate source; 0 when it is not about the candidate
  int column = 0;  ///< 1-based column when the tool says (EDG caret, gcc), else 0
  severity level = severity::error;
  /// The tool's code: EDG's number ("20", "940-D"), gcc's warning flag ("-Wunused"), or the tool
  /// itself when it has no codes ("ptxas", "ld", "as", "nvlink", "nvcc").
  std::string code;
  /// The message, with continuation lines joined by "; ". Diagnostics about other files (a header)
  /// start with "file(line): ".
  std::string message;
};

struct resource_usage {
  std::string kernel;  ///< demangled name, e.g. "relu_kernel(float const*, float*, long)"
  int registers = 0;
  std::int64_t shared_bytes = 0;  ///< static shared memory
  std::int64_t spill_store_bytes = 0;
  std::int64_t spill_load_bytes = 0;
  std::int64_t stack_bytes = 0;  ///< stack frame
};

/// Parses nvcc output. `source_name` is the candidate file as passed to nvcc (only its file name is
/// compared). At most `max` diagnostics; ptxas "info" lines and summaries are skipped.
std::vector<diagnostic> parse_diagnostics(std::string_view log, std::string_view source_name,
                                          std::size_t max = 50);

/// Parses `ptxas info` lines: one entry per entry function (kernel) in order of appearance, plus
/// non-inlined device functions that have a stack frame or spill.
std::vector<resource_usage> parse_ptxas_usage(std::string_view log);

/// "_Z3bigPfi" -> "big(float*, int)"; anything that does not demangle is returned as is.
std::string demangle(const std::string& symbol);

/// The last non-blank line of a tool's output: what it said last where no diagnostic parsed.
std::string last_line(std::string_view log);

/// "line 4: identifier \"x\" is undefined" — the first error, for a one-line reason.
std::string summarize(const diagnostic& d);

}  // namespace kforge::sandbox

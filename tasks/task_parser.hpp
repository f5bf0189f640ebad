#pragma once
// Task files: one JSON object (a `.json` file) or JSON Lines (one task per line; blank lines are
// skipped). Every key is checked: unknown keys, wrong types, bad names and missing required fields
// are errors "FILE:LINE: FIELD: REASON" (FILE:LINE is the file and, for JSON Lines, the line),
// never silent defaults. Required: id, category, description, inputs (name, shape, dtype, init),
// outputs (name, shape, dtype), reference. Optional: tolerance (both atol and rtol when given;
// absent: default_tolerance), variants, allow_cublas (false), provenance (the file's path).

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.hpp"
#include "tasks/task.hpp"

namespace kforge::tasks {

/// Parses one task from JSON text. `where` prefixes every error ("set.jsonl:12").
result<task> parse_task(std::string_view json_text, const std::string& where);

/// Reads task sets, keeping ids unique across everything it read. A bad line is recorded as an
/// error and skipped, so one report can list every problem of a file.
class task_set_reader {
 public:
  /// JSON Lines text; `file` names it in errors and becomes the provenance of tasks without one.
  void add_lines(std::string_view text, const std::string& file);
  /// One JSON object spanning the whole text.
  void add_object(std::string_view text, const std::string& file);
  /// A file: `.json` is one object, anything else JSON Lines. An unreadable file is an error.
  void add_file(const std::string& path);

  const std::vector<task>& tasks() const { return tasks_; }
  std::vector<task> take_tasks() { return std::move(tasks_); }
  const std::vector<error>& errors() const { return errors_; }

 private:
  void add(std::string_view text, const std::string& file, int line);

  std::vector<task> tasks_;
  std::vector<error> errors_;
  std::map<std::string, std::string> first_seen_;  // id -> "file:line"
};

/// The tasks of one file, or its first error (with a count of the others).
result<std::vector<task>> load_task_file(const std::string& path);

/// One task as a single JSON line (no trailing newline), with every field written out (defaults
/// included), so the line parses back to an equal task.
std::string to_json_line(const task& t);

/// The same, indented for people (`kforge tasks show`).
std::string to_json_pretty(const task& t);

}  // namespace kforge::tasks

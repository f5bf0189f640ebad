#pragma once
// Recordings: a file of envelopes received on one link, for `kforge inspect` and `kforge replay`.
//
// Layout (little-endian):
//   header: "KFREC001" | u32 n | n bytes of JSON {"schema_hash","link","created_ns"}
//   record: u32 size | i64 receive_time_ns | size bytes of envelope
// A writer stops adding records once the file would pass its size bound and counts what it drops,
// so the file is always whole. Each record is one append (common/file_writer.hpp), so a writer
// that dies leaves whole records and at most the start of one more; a failed write is cut back to
// the last whole record and returned as an error naming the file. A reader reads the whole records
// of such a file and then reports the torn one with its offset. A reader refuses a file written
// under another schema.

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "common/file_writer.hpp"
#include "common/result.hpp"
#include "messages/envelope.hpp"

namespace kforge::messages {

struct recording_info {
  std::string schema_hash;
  std::string link;
  std::int64_t created_ns = 0;
};

struct record {
  std::int64_t receive_time_ns = 0;
  envelope env;
};

class recording_writer {
 public:
  /// Creates (truncates) `path`. `max_bytes` bounds the whole file.
  static result<recording_writer> create(const std::string& path, const std::string& link,
                                         std::uint64_t max_bytes = std::uint64_t{1} << 30);

  /// Appends one envelope as one whole record. An envelope past the size bound (or invalid) is
  /// dropped and counted, which is no error. A failed write is: it names the file, the file keeps
  /// its whole records only, and every later write returns the same error.
  [[nodiscard]] status write(const envelope& e, std::int64_t receive_time_ns);
  /// Syncs and closes the file (once), with the errors only these calls report; later writes fail.
  [[nodiscard]] status close();

  std::uint64_t written() const noexcept { return written_; }
  std::uint64_t dropped() const noexcept { return dropped_; }
  std::uint64_t bytes() const noexcept { return bytes_; }
  const std::string& path() const noexcept { return file_.path(); }

 private:
  explicit recording_writer(file_writer f) : file_(std::move(f)) {}
  file_writer file_;
  status failed_;  ///< the first failed write; sticky
  std::uint64_t max_bytes_ = 0;
  std::uint64_t bytes_ = 0;
  std::uint64_t written_ = 0;
  std::uint64_t dropped_ = 0;
};

class recording_reader {
 public:
  /// Opens `path` and checks its header; the error names the file and what is wrong.
  static result<recording_reader> open(const std::string& path);

  const recording_info& info() const noexcept { return info_; }
  /// The next record, std::nullopt at the end of the file, or an error naming the offset of a
  /// truncated or invalid record.
  result<std::optional<record>> next();

 private:
  struct closer {
    void operator()(std::FILE* f) const noexcept { std::fclose(f); }
  };
  recording_reader() = default;
  std::unique_ptr<std::FILE, closer> file_;
  std::string path_;
  recording_info info_;
  std::uint64_t offset_ = 0;
};

}  // namespace kforge::messages

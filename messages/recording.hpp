#pragma once
// Recordings: a file of envelopes received on one link, for `kforge inspect` and `kforge replay`.
//
// Layout (little-endian):
//   header: "KFREC001" | u32 n | n bytes of JSON {"schema_hash","link","created_ns"}
//   record: u32 size | i64 receive_time_ns | size bytes of envelope
// A writer stops adding records once the file would pass its size bound and counts what it drops,
// so the file is always whole. A reader refuses a file written under another schema.

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

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

  /// Appends one envelope; returns false when it was dropped because of the size bound.
  bool write(const envelope& e, std::int64_t receive_time_ns);
  /// Flushes buffered records to the file (also done on destruction).
  status flush();

  std::uint64_t written() const noexcept { return written_; }
  std::uint64_t dropped() const noexcept { return dropped_; }
  std::uint64_t bytes() const noexcept { return bytes_; }
  const std::string& path() const noexcept { return path_; }

 private:
  struct closer {
    void operator()(std::FILE* f) const noexcept { std::fclose(f); }
  };
  recording_writer() = default;
  std::unique_ptr<std::FILE, closer> file_;
  std::string path_;
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

#pragma once
// Writing the files a run leaves behind (summary, metrics, logs, recordings, weights, checkpoints)
// so that a failed write is never silent. std::ofstream and stdio buffer what they are given and
// report a full disk or a read-only directory late or not at all (at a flush or a close nobody
// checks), and a crash can leave half a line or half a record. Here every write(2), fsync(2) and
// close(2) is checked and its error names the file and the reason, and an append is written whole
// or not at all (short writes continued; a failed one cut back off the file), so the file ends at a
// boundary its writer chose: a whole line, a whole record. A crash in the middle of an append
// leaves at most the start of that one piece after the whole ones.
//
// Plain POSIX, header only.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

#include "common/result.hpp"

namespace kforge {

/// "PATH: cannot WHAT: REASON", REASON from errno as the failing call left it.
inline error file_error(const std::string& path, const char* what) {
  return error{path + ": cannot " + what + ": " + std::strerror(errno)};
}

/// An open file written by whole pieces, by one writer at a time. Movable, not copyable; the
/// destructor closes without looking at the result, so a writer whose errors matter ends with
/// close().
class file_writer {
 public:
  /// create_new: `path` must not exist yet, not even as a symbolic link (O_CREAT | O_EXCL never
  /// follows one), so nothing is written through a name someone else put there.
  enum class mode { truncate, append, create_new };

  /// Opens (creates) `path` for writing: emptied, kept and written at its end, or made anew.
  static result<file_writer> open(const std::string& path, mode m) {
    const int how = m == mode::append ? O_APPEND : m == mode::truncate ? O_TRUNC : O_EXCL;
    const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | how;
    const int fd = ::open(path.c_str(), flags, 0644);
    if (fd < 0) return file_error(path, "open for writing");
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      auto e = file_error(path, "stat");
      ::close(fd);
      return e;
    }
    return file_writer(fd, path, static_cast<std::uint64_t>(st.st_size));
  }

  file_writer(file_writer&& o) noexcept
      : fd_(std::exchange(o.fd_, -1)), path_(std::move(o.path_)), size_(o.size_) {}
  file_writer& operator=(file_writer&& o) noexcept {
    if (this != &o) {
      discard();
      fd_ = std::exchange(o.fd_, -1);
      path_ = std::move(o.path_);
      size_ = o.size_;
    }
    return *this;
  }
  file_writer(const file_writer&) = delete;
  file_writer& operator=(const file_writer&) = delete;
  ~file_writer() { discard(); }

  /// Writes all of `bytes`, or on an error none of them: what a short write put in the file is
  /// cut off again (as far as the file system lets it: the error says where it did not), so the
  /// file ends where it did before.
  [[nodiscard]] status append(std::string_view bytes) {
    if (fd_ < 0) return error{path_ + ": cannot write: the file is closed"};
    const auto length = bytes.size();
    while (!bytes.empty()) {
      const auto n = ::write(fd_, bytes.data(), bytes.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        auto e = file_error(path_, "write");
        if (bytes.size() < length && ::ftruncate(fd_, static_cast<off_t>(size_)) != 0)
          e.message += " (and the part written could not be cut off: " + std::string(std::strerror(errno)) + ")";
        return e;
      }
      bytes.remove_prefix(static_cast<std::size_t>(n));
    }
    size_ += length;
    return {};
  }

  /// Makes what was written durable (fsync), so a crash of the host cannot leave it torn.
  [[nodiscard]] status sync() {
    if (::fsync(fd_) != 0) return file_error(path_, "sync");
    return {};
  }

  /// Closes the file, with the error a delayed write reports only here (on NFS, for one).
  [[nodiscard]] status close() {
    if (fd_ < 0) return {};
    const int rc = ::close(std::exchange(fd_, -1));
    if (rc != 0 && errno != EINTR) return file_error(path_, "close");
    return {};
  }

  const std::string& path() const noexcept { return path_; }

 private:
  file_writer(int fd, std::string path, std::uint64_t size)
      : fd_(fd), path_(std::move(path)), size_(size) {}
  void discard() noexcept {
    if (fd_ >= 0) ::close(std::exchange(fd_, -1));
  }
  int fd_ = -1;
  std::string path_;
  std::uint64_t size_ = 0;  ///< the file's length after the last whole append
};

/// A file that appears at `path` only whole: written into a temporary file next to it, which
/// commit() syncs, closes and renames over `path`. A reader sees the old file or the whole new one;
/// a failure leaves the old file and no temporary.
class file_replacement {
 public:
  static result<file_replacement> begin(const std::string& path) {
    const std::string tmp = path + ".tmp" + std::to_string(::getpid());
    auto f = file_writer::open(tmp, file_writer::mode::truncate);
    if (!f) return f.err();
    return file_replacement(path, std::move(*f));
  }
  file_replacement(file_replacement&& o) noexcept
      : path_(std::move(o.path_)), file_(std::move(o.file_)), done_(std::exchange(o.done_, true)) {}
  file_replacement& operator=(file_replacement&&) = delete;
  ~file_replacement() {
    if (!done_) ::unlink(file_.path().c_str());
  }

  [[nodiscard]] status append(std::string_view bytes) { return file_.append(bytes); }

  /// `sync`: fsync before the rename, so that after a crash `path` is the old file or the whole
  /// new one (without it the rename may reach the disk before the data does).
  [[nodiscard]] status commit(bool sync = true) {
    if (sync)
      if (auto s = file_.sync(); !s) return s;
    if (auto s = file_.close(); !s) return s;
    if (::rename(file_.path().c_str(), path_.c_str()) != 0)
      return file_error(path_, "move the written file into place");
    done_ = true;
    return {};
  }

 private:
  file_replacement(std::string path, file_writer f) : path_(std::move(path)), file_(std::move(f)) {}
  std::string path_;
  file_writer file_;
  bool done_ = false;
};

/// `bytes` as the whole of `path`, through a file_replacement.
[[nodiscard]] inline status write_file_atomically(const std::string& path, std::string_view bytes,
                                                  bool sync = true) {
  auto f = file_replacement::begin(path);
  if (!f) return f.err();
  if (auto s = f->append(bytes); !s) return s;
  return f->commit(sync);
}

/// `bytes` added at the end of `path` (created if missing) in one append, then closed: for a log
/// written a line at a time by one writer.
[[nodiscard]] inline status append_to_file(const std::string& path, std::string_view bytes) {
  auto f = file_writer::open(path, file_writer::mode::append);
  if (!f) return f.err();
  if (auto s = f->append(bytes); !s) return s;
  return f->close();
}

/// Syncs the file at `path` that another writer (a library's) wrote and closed.
[[nodiscard]] inline status sync_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return file_error(path, "open to sync");
  const int rc = ::fsync(fd);
  const int saved = errno;
  ::close(fd);
  errno = saved;
  if (rc != 0) return file_error(path, "sync");
  return {};
}

}  // namespace kforge

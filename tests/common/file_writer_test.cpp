// file_writer.hpp: a write that cannot be done is an error naming the file, never silent, and a
// file is left whole (every piece appended, or none of it; a replacement whole or not there).
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "common/file_writer.hpp"
#include "tests/file_size_limit.hpp"

namespace fs = std::filesystem;
using kforge::file_writer;

namespace {

fs::path fresh_dir(const std::string& name) {
  auto d = fs::temp_directory_path() / ("kf-file-writer-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string read_text(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

/// Whether `message` names `path` and says `reason`.
bool names(const std::string& message, const fs::path& path, const std::string& reason) {
  return message.find(path.string()) != std::string::npos && message.find(reason) != std::string::npos;
}

}  // namespace

TEST_CASE("appends go to the end, in order, and a reopened file in append mode goes on") {
  const auto dir = fresh_dir("append");
  const auto path = dir / "log.jsonl";
  {
    auto f = file_writer::open(path.string(), file_writer::mode::truncate);
    REQUIRE(f.ok());
    CHECK(f->append("one\n").ok());
    CHECK(f->append("two\n").ok());
    CHECK(f->close().ok());
  }
  CHECK(kforge::append_to_file(path.string(), "three\n").ok());
  CHECK(read_text(path) == "one\ntwo\nthree\n");
  fs::remove_all(dir);
}

TEST_CASE("a full disk is an error naming the file, at the write that meets it") {
  const auto dir = fresh_dir("full");
  const auto path = dir / "metrics.jsonl";
  fs::create_symlink("/dev/full", path);  // opens; every write fails with ENOSPC
  auto f = file_writer::open(path.string(), file_writer::mode::truncate);
  REQUIRE(f.ok());
  const auto s = f->append("a line\n");
  REQUIRE_FALSE(s.ok());
  CHECK(names(s.message(), path, "No space left on device"));
  const auto a = kforge::append_to_file(path.string(), "a line\n");
  REQUIRE_FALSE(a.ok());
  CHECK(names(a.message(), path, "No space left on device"));
  fs::remove_all(dir);
}

TEST_CASE("a piece that does not fit is cut off again: the file keeps its whole pieces") {
  const auto dir = fresh_dir("cut");
  const auto path = dir / "records";
  const std::string piece(300, 'x');
  kforge::status failed;
  {
    auto f = file_writer::open(path.string(), file_writer::mode::truncate);
    REQUIRE(f.ok());
    kforge::testing::file_size_limit limit(1000);  // room for 3 pieces and a third of a fourth
    for (int i = 0; i < 4 && failed.ok(); ++i) failed = f->append(piece);
  }
  REQUIRE_FALSE(failed.ok());
  CHECK(names(failed.message(), path, "File too large"));
  CHECK(fs::file_size(path) == 3 * piece.size());
  fs::remove_all(dir);
}

TEST_CASE("an atomic write replaces the file whole, or leaves the old one and no temporary") {
  const auto dir = fresh_dir("atomic");
  const auto path = dir / "summary.json";
  REQUIRE(kforge::write_file_atomically(path.string(), "{\"leg\": 1}\n").ok());
  CHECK(read_text(path) == "{\"leg\": 1}\n");
  {
    kforge::testing::file_size_limit limit(8);  // the new text does not fit
    const auto s = kforge::write_file_atomically(path.string(), "{\"leg\": 2}\n");
    REQUIRE_FALSE(s.ok());
    CHECK(names(s.message(), path, "File too large"));
  }
  CHECK(read_text(path) == "{\"leg\": 1}\n");
  CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator()) == 1);

  // Where a directory stands in the file's place, the rename fails, naming the file.
  const auto taken = dir / "taken.json";
  fs::create_directories(taken);
  const auto s = kforge::write_file_atomically(taken.string(), "{}\n");
  REQUIRE_FALSE(s.ok());
  CHECK(names(s.message(), taken, "Is a directory"));
  CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator()) == 2);
  fs::remove_all(dir);
}

TEST_CASE("a file that cannot be opened is an error naming it") {
  const auto dir = fresh_dir("open");
  const auto path = dir / "missing" / "x.json";
  auto f = file_writer::open(path.string(), file_writer::mode::append);
  REQUIRE_FALSE(f.ok());
  CHECK(names(f.message(), path, "No such file or directory"));
  fs::remove_all(dir);
}

TEST_CASE("create_new makes a file anew and refuses a name that is already there, links too") {
  const auto d = fresh_dir("create-new");
  const auto made = (d / "made").string();
  auto w = file_writer::open(made, file_writer::mode::create_new);
  REQUIRE(w.ok());
  CHECK(w->append("bytes").ok());
  CHECK(w->close().ok());
  CHECK(read_text(made) == "bytes");
  CHECK_FALSE(file_writer::open(made, file_writer::mode::create_new).ok());
  const auto target = d / "target";
  std::ofstream(target) << "keep";
  fs::create_symlink(target, d / "link");
  const auto through = file_writer::open((d / "link").string(), file_writer::mode::create_new);
  REQUIRE_FALSE(through.ok());
  CHECK(through.message().find("link") != std::string::npos);
  CHECK(read_text(target) == "keep");
  fs::remove_all(d);
}

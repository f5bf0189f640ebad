#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "messages/recording.hpp"
#include "tests/file_size_limit.hpp"

using namespace kforge::messages;
namespace fs = std::filesystem;

namespace {

fs::path temp_file(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("kforge-test-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir / name;
}

envelope blob(std::uint64_t id, std::size_t size) {
  std::string data(size, static_cast<char>('a' + id % 26));
  return make_blob(header{id, id, "test", /*send_time_ns=*/1}, data.data(), data.size());
}

}  // namespace

TEST_CASE("a recording round-trips envelopes and receive times in order") {
  const auto path = temp_file("roundtrip.kfrec").string();
  {
    auto w = recording_writer::create(path, "candidates");
    REQUIRE(w.ok());
    for (std::uint64_t i = 0; i < 100; ++i) CHECK(w->write(blob(i, 100 + i), 1000 + i));
    CHECK(w->written() == 100);
    CHECK(w->close().ok());
  }
  auto r = recording_reader::open(path);
  REQUIRE(r.ok());
  CHECK(r->info().link == "candidates");
  CHECK(r->info().schema_hash == schema_hash());
  for (std::uint64_t i = 0; i < 100; ++i) {
    auto rec = r->next();
    REQUIRE(rec.ok());
    REQUIRE(rec->has_value());
    CHECK((*rec)->receive_time_ns == static_cast<std::int64_t>(1000 + i));
    CHECK((*rec)->env == blob(i, 100 + i));
  }
  auto end = r->next();
  REQUIRE(end.ok());
  CHECK_FALSE(end->has_value());
}

TEST_CASE("the size bound drops whole records and keeps the file readable") {
  const auto path = temp_file("bounded.kfrec").string();
  std::uint64_t written = 0;
  {
    auto w = recording_writer::create(path, "verdicts", 4096);
    REQUIRE(w.ok());
    for (std::uint64_t i = 0; i < 50; ++i) (void)w->write(blob(i, 200), 0);
    CHECK(w->dropped() > 0);
    CHECK(w->written() + w->dropped() == 50);
    CHECK(w->bytes() <= 4096);
    written = w->written();
  }
  CHECK(fs::file_size(path) <= 4096);
  auto r = recording_reader::open(path);
  REQUIRE(r.ok());
  std::uint64_t n = 0;
  for (;;) {
    auto rec = r->next();
    REQUIRE(rec.ok());
    if (!rec->has_value()) break;
    ++n;
  }
  CHECK(n == written);
}

TEST_CASE("a truncated recording reports the offset of the broken record") {
  const auto path = temp_file("truncated.kfrec").string();
  {
    auto w = recording_writer::create(path, "x");
    REQUIRE(w.ok());
    for (std::uint64_t i = 0; i < 3; ++i) (void)w->write(blob(i, 64), 0);
  }
  fs::resize_file(path, fs::file_size(path) - 10);
  auto r = recording_reader::open(path);
  REQUIRE(r.ok());
  CHECK(r->next().ok());
  CHECK(r->next().ok());
  auto bad = r->next();
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.message().find("truncated") != std::string::npos);
  CHECK(bad.message().find("at byte") != std::string::npos);
}

/// The records of `path` as the reader gives them, until its end or its first error.
struct read_back {
  std::uint64_t records = 0;
  kforge::status stop;  ///< success at a clean end
};

read_back read_all(const std::string& path) {
  read_back out;
  auto r = recording_reader::open(path);
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.message()));
  for (;;) {
    auto rec = r->next();
    if (!rec.ok()) {
      out.stop = rec.err();
      return out;
    }
    if (!rec->has_value()) return out;
    CHECK((*rec)->env == blob(out.records, 64));
    ++out.records;
  }
}

TEST_CASE("a writer that died mid-record leaves its whole records readable before the torn one") {
  const auto path = temp_file("torn.kfrec").string();
  std::uint64_t whole = 0;  // the file's length after 3 records
  {
    auto w = recording_writer::create(path, "x");
    REQUIRE(w.ok());
    for (std::uint64_t i = 0; i < 4; ++i) {
      REQUIRE(w->write(blob(i, 64), 0).ok());
      if (i == 2) whole = w->bytes();
    }
  }
  const auto full = fs::file_size(path);
  // Every cut inside the fourth record (its header or its envelope): the three before read back.
  for (auto cut = whole + 1; cut < full; cut += 7) {
    CAPTURE(cut);
    fs::resize_file(path, cut);
    const auto back = read_all(path);
    CHECK(back.records == 3);
    REQUIRE_FALSE(back.stop.ok());
    CHECK(back.stop.message().find("at byte " + std::to_string(whole)) != std::string::npos);
  }
}

TEST_CASE("a write the disk refuses is an error naming the file, which keeps its whole records") {
  const auto path = temp_file("refused.kfrec").string();
  kforge::status failed;
  std::uint64_t written = 0;
  {
    auto w = recording_writer::create(path, "x");
    REQUIRE(w.ok());
    // A full disk: the file may not grow past 1000 bytes, so a record is cut short mid-write.
    kforge::testing::file_size_limit limit(1000);
    for (std::uint64_t i = 0; i < 20 && failed.ok(); ++i) failed = w->write(blob(i, 64), 0);
    written = w->written();
    CHECK_FALSE(w->write(blob(written, 64), 0).ok());  // and it stays failed
  }
  REQUIRE_FALSE(failed.ok());
  CHECK(failed.message().find(path) != std::string::npos);
  CHECK(failed.message().find("File too large") != std::string::npos);
  CHECK(written > 0);
  const auto back = read_all(path);  // to a clean end: no torn record left behind
  CHECK(back.stop.ok());
  CHECK(back.records == written);
}

TEST_CASE("foreign files and other schemas are refused by name") {
  const auto junk = temp_file("junk.kfrec").string();
  std::ofstream(junk) << "definitely not a recording";
  auto r = recording_reader::open(junk);
  REQUIRE_FALSE(r.ok());
  CHECK(r.message().find(junk) != std::string::npos);

  const auto other = temp_file("other-schema.kfrec").string();
  {
    std::ofstream f(other, std::ios::binary);
    const std::string meta = R"({"schema_hash":"0000000000000000000000000000000000000000000000000000000000000000","link":"x"})";
    const std::uint32_t n = static_cast<std::uint32_t>(meta.size());
    f.write("KFREC001", 8);
    const char len[4] = {static_cast<char>(n & 0xff), static_cast<char>(n >> 8), 0, 0};
    f.write(len, 4);
    f << meta;
  }
  auto r2 = recording_reader::open(other);
  REQUIRE_FALSE(r2.ok());
  CHECK(r2.message().find("schema") != std::string::npos);

  CHECK_FALSE(recording_reader::open("/nonexistent/dir/x.kfrec").ok());
}

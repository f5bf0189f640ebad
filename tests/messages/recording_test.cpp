#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "messages/recording.hpp"

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
    CHECK(w->flush().ok());
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

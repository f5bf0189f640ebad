// common/log.hpp: lines carry a timestamp and a level, and KFORGE_LOG_LEVEL filters them. The logger
// is made once per process on first use, so each case logs in a child of its own with stderr
// sent to a file.

#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>
#include <string>

#include "common/log.hpp"

namespace {

// What `body` logs in a child process whose KFORGE_LOG_LEVEL is `level` ("" for unset).
std::string logged_by_child(const std::string& level, const std::function<void()>& body) {
  char path[] = "/tmp/kforge-log-test-XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(fd, 2);
    if (level.empty())
      ::unsetenv("KFORGE_LOG_LEVEL");
    else
      ::setenv("KFORGE_LOG_LEVEL", level.c_str(), 1);
    body();
    std::_Exit(0);
  }
  int st = 0;
  ::waitpid(pid, &st, 0);
  ::close(fd);
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::remove(path);
  CHECK(WIFEXITED(st));
  return ss.str();
}

void all_levels() {
  kforge::log::debug("a debug line");
  kforge::log::info("an info line");
  kforge::log::warn("a warning");
  kforge::log::error("an error");
}

}  // namespace

TEST_CASE("log lines: a timestamp, the level, the text; info and above by default") {
  const auto text = logged_by_child("", all_levels);
  const std::regex line(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3} info    an info line\n)");
  CHECK(std::regex_search(text, line));
  CHECK(text.find("warning a warning") != std::string::npos);
  CHECK(text.find("error   an error") != std::string::npos);
  CHECK(text.find("a debug line") == std::string::npos);
}

TEST_CASE("KFORGE_LOG_LEVEL filters, and a name that is no level is said and ignored") {
  const auto quiet = logged_by_child("error", all_levels);
  CHECK(quiet.find("an info line") == std::string::npos);
  CHECK(quiet.find("a warning") == std::string::npos);
  CHECK(quiet.find("an error") != std::string::npos);
  const auto chatty = logged_by_child("debug", all_levels);
  CHECK(chatty.find("debug   a debug line") != std::string::npos);
  const auto bad = logged_by_child("loud", all_levels);
  CHECK(bad.find("KFORGE_LOG_LEVEL=loud is not a level") != std::string::npos);
  CHECK(bad.find("an info line") != std::string::npos);
  CHECK(bad.find("a debug line") == std::string::npos);
}

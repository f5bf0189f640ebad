// The candidate child's seccomp filter (sandbox/seccomp_filter.hpp) in a forked process: what a
// kernel needs still works, every escape it is meant to stop kills the process with SIGSYS.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <string>
#include <thread>

#include "sandbox/seccomp_filter.hpp"

namespace {

using kforge::sandbox::filter_mode;

// How a forked process that installs the filter and then runs `act` ends: "exit N" or "signal N".
// With `err`, what the process wrote to stderr.
std::string under_filter(const std::function<int()>& act, filter_mode mode = filter_mode::candidate,
                         std::string* err = nullptr) {
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(pipe_fds[1], 2);
    if (!kforge::sandbox::install_candidate_filter(mode)) ::_exit(100);
    ::_exit(act());
  }
  ::close(pipe_fds[1]);
  std::string said;
  char buf[256];
  for (ssize_t n; (n = ::read(pipe_fds[0], buf, sizeof buf)) > 0;) said.append(buf, static_cast<std::size_t>(n));
  ::close(pipe_fds[0]);
  if (err) *err = said;
  int st = 0;
  ::waitpid(pid, &st, 0);
  if (WIFSIGNALED(st)) return "signal " + std::to_string(WTERMSIG(st));
  return "exit " + std::to_string(WEXITSTATUS(st));
}

const std::string killed = "signal " + std::to_string(SIGSYS);

}  // namespace

TEST_CASE("the seccomp filter lets a kernel's process work and kills its escapes") {
  if (under_filter([] { return 0; }) == "exit 100") {
    MESSAGE("SKIP: this host refuses seccomp filters");
    return;
  }
  // What the CUDA runtime and a kernel's host code do.
  CHECK(under_filter([] {
          std::thread t([] {});  // threads (CLONE_THREAD) stay allowed
          t.join();
          const int fd = ::open("/dev/null", O_WRONLY);
          const bool wrote = fd >= 0 && ::write(fd, "x", 1) == 1;
          ::raise(SIGCONT);  // a signal to itself
          return wrote ? 0 : 1;
        }) == "exit 0");
  // What they never need.
  CHECK(under_filter([] { return ::fork() >= 0 ? 0 : 1; }) == killed);
  CHECK(under_filter([] {
          char* argv[] = {const_cast<char*>("/bin/true"), nullptr};
          return ::execv("/bin/true", argv);
        }) == killed);
  CHECK(under_filter([] { return ::socket(AF_INET, SOCK_STREAM, 0) >= 0 ? 0 : 1; }) == killed);
  CHECK(under_filter([] { return ::kill(::getppid(), 0); }) == killed);
  CHECK(under_filter([] { return ::kill(-1, 0); }) == killed);
  CHECK(under_filter([] { return ::setsid() >= 0 ? 0 : 1; }) == killed);
  CHECK(under_filter([] { return ::unshare(0); }) == killed);
}

// A child Nsight Compute profiles: ncu's injected library may open loopback sockets, and a denied
// call is named on stderr (which reaches the profile's skip reason) before the process ends.
TEST_CASE("a profiled child's filter allows sockets and names a denied call") {
  if (under_filter([] { return 0; }) == "exit 100") {
    MESSAGE("SKIP: this host refuses seccomp filters");
    return;
  }
  CHECK(under_filter([] { return ::socket(AF_INET, SOCK_STREAM, 0) >= 0 ? 0 : 1; }, filter_mode::profiled) ==
        "exit 0");
  std::string err;
  CHECK(under_filter([] { return ::setsid() >= 0 ? 0 : 1; }, filter_mode::profiled, &err) ==
        "exit " + std::to_string(128 + SIGSYS));
  CHECK(err.find("seccomp denied system call " + std::to_string(SYS_setsid) + "\n") != std::string::npos);
  CHECK(under_filter([] { return ::fork() >= 0 ? 0 : 1; }, filter_mode::profiled) ==
        "exit " + std::to_string(128 + SIGSYS));
}

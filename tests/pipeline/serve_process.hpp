#pragma once
// `kforge serve` as a child process of a test, on a free port it prints (--port 0): started with
// `args` after "serve", its URL read from the first line it writes, killed with SIGTERM at the end
// (kill_now: SIGKILL at once). The test target defines KFORGE_BINARY.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include <doctest/doctest.h>

namespace kforge::test {

struct serve_process {
  pid_t pid = -1;
  std::string url;

  explicit serve_process(std::vector<std::string> args) {
    args.insert(args.begin(), {KFORGE_BINARY, "serve", "--port", "0"});
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      dup2(fds[1], 1);
      close(fds[0]);
      close(fds[1]);
      execv(KFORGE_BINARY, argv.data());
      _exit(127);
    }
    close(fds[1]);
    // The first line says where it listens; read it byte by byte so nothing after it is consumed.
    std::string line;
    char c;
    while (read(fds[0], &c, 1) == 1 && c != '\n') line += c;
    close(fds[0]);
    const auto at = line.find("http://");
    REQUIRE_MESSAGE(at != std::string::npos, "kforge serve said: " << line);
    url = line.substr(at, line.find(' ', at) - at);
  }
  serve_process(const serve_process&) = delete;
  serve_process& operator=(const serve_process&) = delete;
  void kill_now() { stop(SIGKILL); }
  ~serve_process() { stop(SIGTERM); }

 private:
  void stop(int sig) {
    if (pid <= 0) return;
    ::kill(pid, sig);
    waitpid(pid, nullptr, 0);
    pid = -1;
  }
};

}  // namespace kforge::test

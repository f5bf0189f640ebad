#include "common/subprocess.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

namespace kforge {

result<process_output> run_process(const std::vector<std::string>& argv,
                                   std::chrono::milliseconds timeout, std::size_t max_output) {
  if (argv.empty()) return error{"run_process: empty command"};
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) return error{std::string("pipe: ") + std::strerror(errno)};
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(pipefd[0]);
    ::close(pipefd[1]);
    return error{std::string("fork: ") + std::strerror(errno)};
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    const int devnull = ::open("/dev/null", O_RDONLY);
    ::dup2(devnull, 0);
    ::dup2(pipefd[1], 1);
    ::dup2(pipefd[1], 2);
    ::execvp(args[0], args.data());
    const std::string msg = std::string("cannot run ") + args[0] + ": " + std::strerror(errno);
    (void)!::write(2, msg.data(), msg.size());
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also here, so the group exists before we might kill it
  ::close(pipefd[1]);

  process_output out;
  const auto deadline = start + timeout;
  char buf[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      out.timed_out = true;
      break;
    }
    pollfd p{pipefd[0], POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min<long long>(left.count(), INT_MAX)));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    const ssize_t n = ::read(pipefd[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EOF: the child (and anything holding the pipe) is done writing
    if (out.output.size() < max_output)
      out.output.append(buf, std::min<std::size_t>(n, max_output - out.output.size()));
  }
  if (out.timed_out) ::kill(-pid, SIGKILL);
  ::close(pipefd[0]);
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(st)) out.exit_code = WEXITSTATUS(st);
  if (WIFSIGNALED(st)) out.signal = WTERMSIG(st);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

std::string self_executable() {
  char path[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  return n > 0 ? std::string(path, n) : std::string();
}

}  // namespace kforge

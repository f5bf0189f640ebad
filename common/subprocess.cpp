#include "common/subprocess.hpp"

#include "common/process_setup.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

namespace kforge {

result<process_output> run_limited(const std::vector<std::string>& argv,
                                   const process_limits& limits) {
  if (argv.empty()) return error{"run_limited: empty command"};
  const std::string exe = detail::resolve_program(argv[0]);
  auto args = detail::c_strings(argv);
  const auto env_strings = detail::child_environment(limits.env, false, {});
  auto envp = detail::c_strings(env_strings);
  const detail::child_rlimits rl{limits.address_space_bytes, limits.file_size_bytes,
                                 limits.cpu_seconds, 0, limits.core_dumps};

  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) return error{std::string("pipe: ") + std::strerror(errno)};
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(pipefd[0]);
    ::close(pipefd[1]);
    return error{std::string("fork: ") + std::strerror(errno)};
  }
  if (pid == 0) {
    // Only async-signal-safe calls from here to exec.
    const int devnull = ::open("/dev/null", O_RDONLY);
    ::dup2(devnull, 0);
    ::dup2(pipefd[1], 1);
    ::dup2(pipefd[1], 2);
    detail::child_prepare(rl, 3);
    if (!limits.working_dir.empty() && ::chdir(limits.working_dir.c_str()) != 0)
      detail::child_fail("cannot enter the working directory\n");
    ::execve(exe.c_str(), args.data(), envp.data());
    detail::child_fail("cannot run the program: exec failed\n");
  }
  ::setpgid(pid, pid);  // also here, so the group exists before we might kill it
  ::close(pipefd[1]);

  process_output out;
  const auto deadline = start + limits.time;
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
    if (r <= 0) continue;  // EINTR or the deadline: the loop head decides
    const ssize_t n = ::read(pipefd[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EOF: everything holding the pipe is done writing
    if (out.output.size() < limits.max_output)
      out.output.append(buf, std::min<std::size_t>(n, limits.max_output - out.output.size()));
  }
  // Also on a clean exit: helpers that outlived the leader must not keep running.
  ::kill(-pid, SIGKILL);
  ::close(pipefd[0]);
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(st)) out.exit_code = WEXITSTATUS(st);
  if (WIFSIGNALED(st)) out.signal = WTERMSIG(st);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}


result<process_output> run_process(const std::vector<std::string>& argv,
                                   std::chrono::milliseconds timeout, std::size_t max_output) {
  process_limits limits;
  limits.time = timeout;
  limits.max_output = max_output;
  return run_limited(argv, limits);
}

std::string self_executable() {
  char path[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  return n > 0 ? std::string(path, n) : std::string();
}

}  // namespace kforge

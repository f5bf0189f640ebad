#include "common/subprocess.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <sstream>

extern char** environ;

namespace kforge {

namespace {

std::string resolve(const std::string& prog) {
  if (prog.find('/') != std::string::npos) return prog;
  if (const char* path = std::getenv("PATH")) {
    std::stringstream ss(path);
    for (std::string dir; std::getline(ss, dir, ':');) {
      const std::string p = (dir.empty() ? std::string(".") : dir) + "/" + prog;
      if (::access(p.c_str(), X_OK) == 0) return p;
    }
  }
  return prog;
}

// The child's environment: ours with `overrides` replacing same-named entries. Built before fork,
// because after fork in a multi-threaded process only async-signal-safe calls are allowed.
std::vector<std::string> child_env(
    const std::vector<std::pair<std::string, std::string>>& overrides) {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const std::string_view kv(*e);
    const bool replaced = std::any_of(overrides.begin(), overrides.end(), [&](const auto& o) {
      return kv.size() > o.first.size() && kv.compare(0, o.first.size(), o.first) == 0 &&
             kv[o.first.size()] == '=';
    });
    if (!replaced) env.emplace_back(kv);
  }
  for (const auto& [k, v] : overrides) env.push_back(k + "=" + v);
  return env;
}

void set_limit(int resource, std::uint64_t value) {
  if (value == 0) return;
  const rlimit rl{static_cast<rlim_t>(value), static_cast<rlim_t>(value)};
  ::setrlimit(resource, &rl);
}

}  // namespace

result<process_output> run_limited(const std::vector<std::string>& argv,
                                   const process_limits& limits) {
  if (argv.empty()) return error{"run_limited: empty command"};
  const std::string exe = resolve(argv[0]);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const auto env_strings = child_env(limits.env);
  std::vector<char*> envp;
  for (const auto& e : env_strings) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

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
    ::setpgid(0, 0);
    set_limit(RLIMIT_AS, limits.address_space_bytes);
    set_limit(RLIMIT_FSIZE, limits.file_size_bytes);
    set_limit(RLIMIT_CPU, limits.cpu_seconds);
    if (!limits.core_dumps) {
      const rlimit none{0, 0};
      ::setrlimit(RLIMIT_CORE, &none);
    }
    const int devnull = ::open("/dev/null", O_RDONLY);
    ::dup2(devnull, 0);
    ::dup2(pipefd[1], 1);
    ::dup2(pipefd[1], 2);
    if (!limits.working_dir.empty() && ::chdir(limits.working_dir.c_str()) != 0) {
      static const char msg[] = "cannot enter the working directory\n";
      (void)!::write(2, msg, sizeof msg - 1);
      ::_exit(127);
    }
    ::execve(exe.c_str(), args.data(), envp.data());
    static const char msg[] = "cannot run the program: exec failed\n";
    (void)!::write(2, msg, sizeof msg - 1);
    ::_exit(127);
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

#include "runtime/worker_processes.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "common/subprocess.hpp"

namespace kforge::pipeline {

namespace fs = std::filesystem;

namespace {

std::string describe_exit(int st) {
  if (WIFEXITED(st)) return "exited with status " + std::to_string(WEXITSTATUS(st));
  if (WIFSIGNALED(st)) return std::string("killed by signal ") + std::to_string(WTERMSIG(st)) +
                              " (" + ::strsignal(WTERMSIG(st)) + ")";
  return "ended";
}

}  // namespace

bool required_process(const process_spec& p) {
  for (auto k : all_actor_kinds)
    if (k != actor_kind::sandbox_worker && p.count(k) > 0) return true;
  return false;
}

result<worker_process> spawn_worker(const std::string& manifest_path, const std::string& process,
                                    const std::string& run_dir, std::int64_t steps,
                                    const std::optional<resume_point>& resume,
                                    const std::vector<std::string>& launcher,
                                    const std::string& where) {
  const auto exe = self_executable();
  std::vector<std::string> args = launcher;
  for (const auto& a : {exe, std::string("worker"), std::string("--manifest"), manifest_path,
                        std::string("--process"), process, std::string("--run-dir"), run_dir,
                        std::string("--steps"), std::to_string(steps)})
    args.push_back(a);
  if (resume)
    for (const auto& a : {std::string("--resume-step"), std::to_string(resume->step),
                          std::string("--resume-checkpoint"), resume->checkpoint})
      args.push_back(a);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const auto logs = fs::path(run_dir) / "logs";
  const auto log = (logs / (process + (launcher.empty() ? ".log" : ".launch.log"))).string();
  const int mode = O_WRONLY | O_CREAT | O_CLOEXEC | (resume ? O_APPEND : O_TRUNC);
  if (!launcher.empty() && !resume) {
    // The launcher appends the worker's output to PROCESS.log: a fresh run starts it empty.
    const int fd = ::open((logs / (process + ".log")).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) ::close(fd);
  }
  const pid_t pid = ::fork();
  if (pid < 0) return error{"cannot start process " + process + ": fork failed"};
  if (pid == 0) {
    const int fd = ::open(log.c_str(), mode, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    // A launcher (srun) is found on PATH as a shell would; kforge itself by its own path.
    if (launcher.empty())
      ::execv(exe.c_str(), argv.data());
    else
      ::execvp(argv[0], argv.data());
    const std::string why = std::string("kforge run: cannot start ") + argv[0] + ": " +
                            std::strerror(errno) + "\n";
    (void)!::write(2, why.data(), why.size());
    ::_exit(127);
  }
  worker_process w{process, pid, true, true, "", where, !launcher.empty()};
  return w;
}

bool reap_worker(worker_process& w) {
  if (!w.running) return false;
  int st = 0;
  if (::waitpid(w.pid, &st, WNOHANG) != w.pid) return false;
  w.running = false;
  w.exit = describe_exit(st);
  return true;
}

void kill_worker(worker_process& w, const std::string& why) {
  if (!w.running) return;
  int st = 0;
  if (w.launched) {
    // srun passes SIGTERM on to the step and ends when it has; 5 s, then it is killed.
    ::kill(w.pid, SIGTERM);
    for (int i = 0; i < 100; ++i) {
      if (::waitpid(w.pid, &st, WNOHANG) == w.pid) {
        w.running = false;
        w.exit = why;
        return;
      }
      ::usleep(50 * 1000);
    }
  }
  ::kill(w.pid, SIGKILL);
  ::waitpid(w.pid, &st, 0);
  w.running = false;
  w.exit = why;
}

}  // namespace kforge::pipeline

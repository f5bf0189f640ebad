#include "stages/inference_servers.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <thread>

#include <httplib.h>

#include "common/text_file.hpp"

namespace kforge::pipeline {

namespace {

using clock_type = std::chrono::steady_clock;

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (auto at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
}

// The server's shell in a process group of its own, its output to `log`.
result<pid_t> spawn_server(const std::string& command, const std::string& gpu, const std::string& log) {
  const pid_t pid = ::fork();
  if (pid < 0) return error{std::string("fork failed: ") + std::strerror(errno)};
  if (pid == 0) {
    ::setpgid(0, 0);
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    if (!gpu.empty()) ::setenv("CUDA_VISIBLE_DEVICES", gpu.c_str(), 1);
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also here: the group exists before anyone signals it
  return pid;
}

// Waits until GET /health answers 200, the server's process ends, or the deadline passes.
status wait_ready(pid_t pid, int port, clock_type::time_point deadline) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(1, 0);
  c.set_read_timeout(5, 0);
  while (true) {
    int st = 0;
    if (::waitpid(pid, &st, WNOHANG) == pid)
      return error{WIFEXITED(st) ? "it exited with status " + std::to_string(WEXITSTATUS(st))
                                 : "it was killed by signal " + std::to_string(WTERMSIG(st))};
    if (auto res = c.Get("/health"); res && res->status == 200) return {};
    if (clock_type::now() >= deadline) return error{"it did not answer GET /health with 200 in time"};
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

}  // namespace

std::string server_command(const std::string& command, int port, const std::string& gpu) {
  std::string s = command;
  replace_all(s, "{port}", std::to_string(port));
  replace_all(s, "{gpu}", gpu);
  return s;
}

std::string visible_device(int ordinal, const std::string& visible) {
  if (visible.empty()) return std::to_string(ordinal);
  std::istringstream in(visible);
  std::string entry;
  for (int i = 0; std::getline(in, entry, ','); ++i)
    if (i == ordinal) return entry;
  return std::to_string(ordinal);
}

result<std::unique_ptr<inference_servers>> inference_servers::start(const sampler_server& o,
                                                                    const std::vector<int>& gpus,
                                                                    const std::string& log_dir,
                                                                    std::chrono::milliseconds grace) {
  const std::size_t n = o.count > 0 ? static_cast<std::size_t>(o.count) : std::max<std::size_t>(1, gpus.size());
  std::error_code ec;
  std::filesystem::create_directories(log_dir, ec);
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  std::unique_ptr<inference_servers> s(new inference_servers);
  s->grace_ = grace;
  const auto deadline = clock_type::now() + std::chrono::milliseconds(static_cast<long long>(o.ready_timeout_s * 1000));
  // All start at once (each loads its model meanwhile), then each is waited for.
  std::vector<std::string> commands, logs;
  for (std::size_t k = 0; k < n; ++k) {
    const int port = o.port + static_cast<int>(k);
    // Servers beyond the group's GPUs take them round robin.
    const std::string gpu = gpus.empty() ? "" : visible_device(gpus[k % gpus.size()], visible ? visible : "");
    commands.push_back(server_command(o.command, port, gpu));
    logs.push_back((std::filesystem::path(log_dir) / ("server-" + std::to_string(k) + ".log")).string());
    auto pid = spawn_server(commands.back(), gpu, logs.back());
    if (!pid) return error{"[sampler.server] server " + std::to_string(k) + ": cannot start: " + pid.message()};
    s->pids_.push_back(*pid);
    s->urls_.push_back("http://127.0.0.1:" + std::to_string(port));
  }
  for (std::size_t k = 0; k < n; ++k) {
    if (auto ready = wait_ready(s->pids_[k], o.port + static_cast<int>(k), deadline); !ready) {
      const auto last = last_line_of(logs[k]);
      return error{"[sampler.server] server " + std::to_string(k) + " (" + commands[k] + "): " + ready.message() +
                   " (ready_timeout_s " + std::to_string(static_cast<long long>(o.ready_timeout_s)) + "); its log " +
                   logs[k] + (last.empty() ? " is empty" : " ends: " + last)};
    }
  }
  return s;
}

void inference_servers::stop() {
  for (const pid_t pid : pids_) ::kill(-pid, SIGTERM);
  const auto until = clock_type::now() + grace_;
  std::vector<bool> done(pids_.size(), false);
  for (bool all = false; !all;) {
    all = true;
    for (std::size_t k = 0; k < pids_.size(); ++k) {
      if (done[k]) continue;
      int st = 0;
      const pid_t r = ::waitpid(pids_[k], &st, WNOHANG);
      if (r == pids_[k] || (r < 0 && errno == ECHILD)) done[k] = true;
      else all = false;
    }
    if (all || clock_type::now() >= until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  // What is left of each group (the shell's children included) is killed.
  for (std::size_t k = 0; k < pids_.size(); ++k) {
    ::kill(-pids_[k], SIGKILL);
    if (!done[k]) ::waitpid(pids_[k], nullptr, 0);
  }
  pids_.clear();
}

inference_servers::~inference_servers() { stop(); }

}  // namespace kforge::pipeline

#include "common/child_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/process_setup.hpp"

namespace kforge {

namespace {
void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

constexpr const char* nonce_key = "\"nonce\":\"";

// 128 random bits as hex: unguessable by code that has not read this request.
std::string fresh_nonce() {
  unsigned char bytes[16] = {};
  std::size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n > 0) got += static_cast<std::size_t>(n);
    else if (errno != EINTR) break;
  }
  static constexpr char digits[] = "0123456789abcdef";
  std::string s;
  for (unsigned char b : bytes) {
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

// `{...}` with "nonce" as its first member.
std::string with_nonce(const std::string& json_line, const std::string& nonce) {
  std::string out = "{" + std::string(nonce_key) + nonce + "\"";
  const std::string rest = json_line.size() >= 2 ? json_line.substr(1) : "}";
  if (rest != "}") out += ",";
  return out + rest;
}
}  // namespace

std::string request_nonce(const std::string& json_line) {
  const auto at = json_line.find(nonce_key);
  if (at == std::string::npos) return {};
  const auto begin = at + std::char_traits<char>::length(nonce_key);
  const auto end = json_line.find('"', begin);
  return end == std::string::npos ? std::string() : json_line.substr(begin, end - begin);
}

namespace {

/// What the child does between its start (and confinement) and exec, prepared before: only
/// system calls there.
struct exec_plan {
  const char* exe;
  char* const* argv;
  char* const* envp;
  detail::child_rlimits limits;
  const char* working_dir;  ///< nullptr: keep ours
  int output;               ///< becomes fds 1 and 2
  int control;              ///< becomes fd 3
};

[[noreturn]] void become_child(void* p) {
  const auto& x = *static_cast<const exec_plan*>(p);
  // fd 3 is the control socket.
  const int devnull = ::open("/dev/null", O_RDONLY);
  ::dup2(devnull, 0);
  ::dup2(x.output, 1);
  ::dup2(x.output, 2);
  ::dup2(x.control, 3);  // dup2 clears CLOEXEC on the new descriptor
  detail::child_prepare(x.limits, 4);
  if (x.working_dir && ::chdir(x.working_dir) != 0) detail::child_fail("cannot enter the working directory\n");
  ::execve(x.exe, x.argv, x.envp);
  detail::child_fail("cannot run the program: exec failed\n");
}

}  // namespace

result<child_process> child_process::start(const std::vector<std::string>& argv,
                                           const child_options& options) {
  if (argv.empty()) return error{"child_process: empty command"};
  const std::string exe = detail::resolve_program(argv[0]);
  auto args = detail::c_strings(argv);
  const auto env_strings =
      detail::child_environment(options.env, options.scrub_env, options.keep_env);
  auto envp = detail::c_strings(env_strings);
  std::optional<detail::confinement_plan> confine;
  if (options.confine && options.confine->any()) confine.emplace(*options.confine);

  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    return error{std::string("socketpair: ") + std::strerror(errno)};
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) {
    ::close(sv[0]);
    ::close(sv[1]);
    return error{std::string("pipe: ") + std::strerror(errno)};
  }
  exec_plan plan{exe.c_str(),
                 args.data(),
                 envp.data(),
                 {0, options.file_size_bytes, options.cpu_seconds, options.processes, false},
                 options.working_dir.empty() ? nullptr : options.working_dir.c_str(),
                 out[1],
                 sv[1]};
  pid_t pid = -1;
  std::string start_error;
  if (confine) {
    // A confinement that fails is said on the child's output, where the first request finds it.
    auto started = detail::start_confined(*confine, out[1], become_child, &plan);
    if (started) pid = *started;
    else start_error = started.err().message;
  } else {
    pid = ::fork();
    if (pid == 0) become_child(&plan);
    if (pid < 0) start_error = std::string("fork: ") + std::strerror(errno);
  }
  if (pid < 0) {
    for (int fd : {sv[0], sv[1], out[0], out[1]}) ::close(fd);
    return error{start_error};
  }
  ::setpgid(pid, pid);
  ::close(sv[1]);
  ::close(out[1]);
  child_process c;
  c.pid_ = pid;
  c.control_ = sv[0];
  c.output_ = out[0];
  c.options_ = options;
  ::fcntl(c.output_, F_SETFL, ::fcntl(c.output_, F_GETFL) | O_NONBLOCK);
  return c;
}

child_process::child_process(child_process&& o) noexcept { *this = std::move(o); }

child_process& child_process::operator=(child_process&& o) noexcept {
  if (this != &o) {
    kill();
    pid_ = std::exchange(o.pid_, -1);
    control_ = std::exchange(o.control_, -1);
    output_ = std::exchange(o.output_, -1);
    pending_ = std::move(o.pending_);
    output_buf_ = std::move(o.output_buf_);
    dropped_ = o.dropped_;
    options_ = std::move(o.options_);
    last_end_ = std::move(o.last_end_);
  }
  return *this;
}

child_process::~child_process() { kill(); }

void child_process::drain_output() {
  if (output_ < 0) return;
  char buf[8192];
  for (;;) {
    const ssize_t n = ::read(output_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    const std::size_t room =
        output_buf_.size() < options_.max_output ? options_.max_output - output_buf_.size() : 0;
    output_buf_.append(buf, std::min<std::size_t>(room, n));
    dropped_ += n - std::min<std::size_t>(room, n);
  }
}

std::string child_process::take_output() {
  drain_output();
  std::string s = std::move(output_buf_);
  if (dropped_ > 0) s += "\n[" + std::to_string(dropped_) + " more bytes of output dropped]\n";
  output_buf_.clear();
  dropped_ = 0;
  return s;
}

std::string child_process::reap_description(int status) const {
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = ::strsignal(sig);
    return "signal " + std::to_string(sig) + (name ? std::string(" (") + name + ")" : "");
  }
  return "ended";
}

std::string child_process::kill() {
  drain_output();
  if (pid_ > 0) {
    ::kill(-pid_, SIGKILL);
    ::kill(pid_, SIGKILL);
    int st = 0;
    while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
    last_end_ = reap_description(st);
    pid_ = -1;
  }
  close_fd(control_);
  drain_output();
  close_fd(output_);
  return last_end_;
}

std::optional<std::string> child_process::finish(std::chrono::milliseconds timeout) {
  if (!running()) return last_end_;
  close_fd(control_);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    drain_output();  // a full pipe would stall a child writing its last words
    int st = 0;
    if (::waitpid(pid_, &st, WNOHANG) == pid_) {
      ::kill(-pid_, SIGKILL);  // helpers it left in its group must not survive it
      last_end_ = reap_description(st);
      pid_ = -1;
      kill();  // drains what is left and closes the descriptors
      return last_end_;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      kill();
      return std::nullopt;
    }
    ::usleep(5'000);
  }
}

// Whether the control channel holds nothing unread (a reply to no request would be there).
bool child_process::control_quiet() {
  if (!pending_.empty()) return false;
  char byte = 0;
  for (;;) {
    const ssize_t n = ::recv(control_, &byte, 1, MSG_DONTWAIT | MSG_PEEK);
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);  // 0: hung up, also not quiet
  }
}

std::string child_process::end_after_hangup() {
  // The control socket closed: the child is exiting or dead. Give it a moment to finish, so the
  // description says how it really ended (a crash is not a kill of ours).
  for (int i = 0; i < 50; ++i) {
    int st = 0;
    if (::waitpid(pid_, &st, WNOHANG) == pid_) {
      ::kill(-pid_, SIGKILL);  // helpers it left in its group must not survive it
      last_end_ = reap_description(st);
      pid_ = -1;
      kill();  // closes the descriptors
      return last_end_;
    }
    ::usleep(10'000);
  }
  return kill() + " after closing its control channel";
}

child_reply child_process::request(const std::string& json_line,
                                   std::chrono::milliseconds timeout) {
  child_reply reply;
  auto fail = [&](child_failure f, std::string detail) {
    reply.failure = f;
    reply.detail = std::move(detail);
    if (running()) kill();
    return reply;
  };
  if (!running()) return fail(child_failure::died, last_end_.empty() ? "not started" : last_end_);
  std::string nonce;
  if (options_.reply_nonce) {
    if (!control_quiet())
      return fail(child_failure::protocol, "the child wrote to its control channel unasked");
    nonce = fresh_nonce();
  }

  const std::string line = (nonce.empty() ? json_line : with_nonce(json_line, nonce)) + "\n";
  for (std::size_t sent = 0; sent < line.size();) {
    const ssize_t n = ::send(control_, line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return fail(child_failure::died, end_after_hangup());
    sent += static_cast<std::size_t>(n);
  }

  const auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[65536];
  for (;;) {
    if (const auto nl = pending_.find('\n'); nl != std::string::npos) {
      reply.json = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      if (reply.json.empty() || reply.json.front() != '{')
        return fail(child_failure::protocol, "reply is not a JSON object");
      if (options_.reply_nonce) {
        if (!pending_.empty()) return fail(child_failure::protocol, "more than one reply to a request");
        if (reply.json.find(std::string(nonce_key) + nonce + "\"") == std::string::npos)
          return fail(child_failure::protocol, "a reply without this request's nonce");
      }
      return reply;
    }
    if (pending_.size() > options_.max_reply)
      return fail(child_failure::protocol, "reply longer than " +
                                               std::to_string(options_.max_reply) + " bytes");
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      return fail(child_failure::timeout,
                  "no reply within " + std::to_string(timeout.count()) + " ms");
    pollfd p[2] = {{control_, POLLIN, 0}, {output_, POLLIN, 0}};
    const int r = ::poll(p, output_ >= 0 ? 2 : 1,
                         static_cast<int>(std::min<long long>(left.count(), 1'000'000)));
    if (r <= 0) continue;
    if (p[1].revents & (POLLIN | POLLHUP)) drain_output();
    if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      const ssize_t n = ::recv(control_, buf, sizeof buf, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return fail(child_failure::died, end_after_hangup());
      pending_.append(buf, static_cast<std::size_t>(n));
    }
  }
}

bool control_channel::read(std::string& line) {
  char buf[65536];
  for (;;) {
    if (const auto nl = pending_.find('\n'); nl != std::string::npos) {
      line = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      return true;
    }
    const ssize_t n = ::read(fd_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    pending_.append(buf, static_cast<std::size_t>(n));
  }
}

bool control_channel::write(const std::string& json_line) {
  const std::string line = json_line + "\n";
  for (std::size_t sent = 0; sent < line.size();) {
    const ssize_t n = ::send(fd_, line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace kforge

#pragma once
// A long-lived child program we talk to: one JSON object per line over a private socket (the
// child's fd 3), its stdout and stderr drained into a bounded buffer, its whole process group
// killed on timeout or when we let go. The sandbox's supervisor runs candidate children and the
// reference server this way (sandbox/runner.hpp); the child side is control_channel below.
//
// Everything a child needs is passed explicitly: descriptors above 3 are closed, the environment
// can be scrubbed to a keep-list, rlimits are set before exec. A reply that is not one JSON object
// on one line is a protocol error, never trusted.
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/confinement.hpp"
#include "common/result.hpp"

namespace kforge {

struct child_options {
  /// Working directory; empty keeps ours.
  std::string working_dir;
  /// Keep only these variables (plus `env`); empty list with scrub=false keeps everything.
  bool scrub_env = false;
  std::vector<std::string> keep_env;
  std::vector<std::pair<std::string, std::string>> env;
  /// rlimits of the child (0: inherited). Never RLIMIT_AS for a child that creates a CUDA context.
  std::uint64_t file_size_bytes = 0;
  std::uint64_t cpu_seconds = 0;
  std::uint64_t processes = 0;
  /// Output kept per window (see take_output); the rest is read and dropped.
  std::size_t max_output = 64 << 10;
  /// A reply line longer than this is a protocol error (the child is killed).
  std::size_t max_reply = 16 << 20;
  /// Every request carries a fresh random "nonce" that the reply must echo, and the channel must
  /// hold nothing but that one reply: bytes before a request, a second line or a wrong nonce is a
  /// protocol error. For children that run code we do not trust in their own process (sandbox
  /// candidates), so a line that code writes on fd 3 is never taken for the child's reply.
  bool reply_nonce = false;
  /// Namespaces, a read-only root, an unprivileged user, no_new_privs and a death signal
  /// (confinement.hpp). `working_dir` must then be one of its writable paths.
  std::optional<confinement> confine;
};

/// Why a request got no reply.
enum class child_failure { none, timeout, died, protocol };

struct child_reply {
  child_failure failure = child_failure::none;
  std::string detail;  ///< the signal, exit code, or protocol problem
  /// The reply object (a JSON text) when failure == none.
  std::string json;
};

class child_process {
 public:
  /// Starts argv. Fails only if it could not be started at all.
  static result<child_process> start(const std::vector<std::string>& argv,
                                     const child_options& options);
  child_process() = default;
  child_process(child_process&&) noexcept;
  child_process& operator=(child_process&&) noexcept;
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;
  /// Kills the process group (SIGKILL) and reaps the child.
  ~child_process();

  bool running() const noexcept { return pid_ > 0; }
  pid_t pid() const noexcept { return pid_; }

  /// Sends one line (a JSON object, no newline inside) and waits up to `timeout` for one reply
  /// line. On timeout, death or a malformed reply the child is killed: start a new one. With
  /// child_options::reply_nonce the request gets a "nonce" member and the reply must echo it.
  child_reply request(const std::string& json_line, std::chrono::milliseconds timeout);

  /// The output (stdout+stderr) gathered since the last call, cut at max_output bytes, with a
  /// note of how much was dropped.
  std::string take_output();

  /// Closes the control channel (a sandbox child then exits: the supervisor went away) and waits
  /// up to `timeout` for the process to end on its own, gathering its output (take_output), for a
  /// child whose last words matter: ncu prints its report after the program it profiled ends. How
  /// it ended ("exit 0"), or nullopt when it was still running at `timeout` (then killed).
  std::optional<std::string> finish(std::chrono::milliseconds timeout);

  /// SIGKILL to the group, reap, close. Returns a description of how it ended ("exit 0",
  /// "signal 11 (Segmentation fault)").
  std::string kill();

 private:
  void drain_output();
  bool control_quiet();
  std::string end_after_hangup();
  std::string reap_description(int status) const;

  pid_t pid_ = -1;
  int control_ = -1;
  int output_ = -1;
  std::string pending_;  ///< control bytes read past the last reply line
  std::string output_buf_;
  std::size_t dropped_ = 0;
  child_options options_;
  std::string last_end_;
};

/// The nonce of a request line sent with child_options::reply_nonce ("" when it has none): the
/// child's side copies it into its reply.
std::string request_nonce(const std::string& json_line);

/// The child's side: reads request lines from fd 3 and writes reply lines back.
class control_channel {
 public:
  explicit control_channel(int fd = 3) : fd_(fd) {}
  /// The next request line; false at end of input (the supervisor went away).
  bool read(std::string& line);
  /// Writes one reply (a JSON text without newlines).
  bool write(const std::string& json_line);

 private:
  int fd_;
  std::string pending_;
};

}  // namespace kforge

#include "common/process_setup.hpp"

#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string_view>

extern char** environ;

namespace kforge::detail {

std::string resolve_program(const std::string& prog) {
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

namespace {
bool has_name(std::string_view kv, std::string_view name) {
  return kv.size() > name.size() && kv.compare(0, name.size(), name) == 0 && kv[name.size()] == '=';
}
}  // namespace

std::vector<std::string> child_environment(
    const std::vector<std::pair<std::string, std::string>>& overrides, bool scrub,
    const std::vector<std::string>& keep) {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const std::string_view kv(*e);
    if (scrub && std::none_of(keep.begin(), keep.end(),
                              [&](const std::string& k) { return has_name(kv, k); }))
      continue;
    const bool replaced = std::any_of(overrides.begin(), overrides.end(),
                                      [&](const auto& o) { return has_name(kv, o.first); });
    if (!replaced) env.emplace_back(kv);
  }
  for (const auto& [k, v] : overrides) env.push_back(k + "=" + v);
  return env;
}

std::vector<char*> c_strings(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (const auto& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

namespace {
void set_limit(int resource, std::uint64_t value) noexcept {
  if (value == 0) return;
  const rlimit rl{static_cast<rlim_t>(value), static_cast<rlim_t>(value)};
  ::setrlimit(resource, &rl);
}
}  // namespace

void child_prepare(const child_rlimits& limits, int first_closed) noexcept {
  ::setpgid(0, 0);
  set_limit(RLIMIT_AS, limits.address_space);
  set_limit(RLIMIT_FSIZE, limits.file_size);
  set_limit(RLIMIT_CPU, limits.cpu_seconds);
  set_limit(RLIMIT_NPROC, limits.processes);
  if (!limits.core_dumps) {
    const rlimit none{0, 0};
    ::setrlimit(RLIMIT_CORE, &none);
  }
  // Descriptors the parent had open (sockets, cache files, other children's pipes) must not leak
  // into a program we do not trust; close_range is one system call and async-signal-safe.
#ifdef SYS_close_range
  if (::syscall(SYS_close_range, static_cast<unsigned>(first_closed), ~0u, 0u) == 0) return;
#endif
  for (int fd = first_closed; fd < 4096; ++fd) ::close(fd);
}

void child_fail(const char* msg) noexcept {
  (void)!::write(2, msg, std::strlen(msg));
  ::_exit(127);
}

}  // namespace kforge::detail

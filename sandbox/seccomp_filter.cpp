#include "sandbox/seccomp_filter.hpp"

#include <sched.h>
#include <signal.h>
#include <seccomp.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>

namespace kforge::sandbox {

namespace {

// Killed outright whatever their arguments.
constexpr const char* killed[] = {
    // processes and programs
    "fork", "vfork", "execve", "execveat",
    // other processes
    "ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "kcmp", "pidfd_open",
    "pidfd_getfd", "pidfd_send_signal", "tkill",
    // the filesystem tree and namespaces
    "mount", "umount2", "pivot_root", "chroot", "setns", "unshare", "open_by_handle_at",
    "name_to_handle_at", "fanotify_init", "mknod", "mknodat",
    // leaving the process group the supervisor kills
    "setsid", "setpgid",
    // the kernel
    "io_uring_setup", "io_uring_enter", "io_uring_register", "bpf", "userfaultfd", "perf_event_open",
    "keyctl", "add_key", "request_key", "init_module", "finit_module", "delete_module", "kexec_load",
    "kexec_file_load", "reboot", "swapon", "swapoff", "acct", "quotactl", "syslog", "iopl", "ioperm",
    "personality", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "vhangup",
    "seccomp",
    // identities
    "setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setfsuid", "setfsgid",
    "setgroups", "capset"};

// New sockets and connections (the control socket is inherited: sendmsg stays).
constexpr const char* network[] = {"socket", "socketpair", "connect", "bind", "listen", "accept", "accept4"};

// A profiled child's trap: says which call was denied, then ends the process as the kill would.
void report_denied_call(int, siginfo_t* info, void*) {
  char line[96];
  const int n = std::snprintf(line, sizeof line, "kforge sandbox-child: seccomp denied system call %d\n",
                              info ? info->si_syscall : -1);
  if (n > 0) (void)!::write(2, line, static_cast<std::size_t>(n));
  ::_exit(128 + SIGSYS);
}

struct filter_deleter {
  void operator()(void* ctx) const { seccomp_release(ctx); }
};

status add(scmp_filter_ctx ctx, const char* name, std::uint32_t action, unsigned count = 0,
           scmp_arg_cmp cmp = {}) {
  const int nr = seccomp_syscall_resolve_name(name);
  if (nr == __NR_SCMP_ERROR) return {};  // not a system call on this architecture
  const int rc = count ? seccomp_rule_add(ctx, action, nr, count, cmp) : seccomp_rule_add(ctx, action, nr, 0);
  if (rc != 0) return error{std::string("seccomp rule for ") + name + ": " + std::strerror(-rc)};
  return {};
}

}  // namespace

status install_candidate_filter(filter_mode mode) {
  std::unique_ptr<void, filter_deleter> ctx(seccomp_init(SCMP_ACT_ALLOW));
  if (!ctx) return error{"seccomp_init failed"};
  if (const int rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_TSYNC, 1); rc != 0)
    return error{std::string("seccomp: cannot cover every thread: ") + std::strerror(-rc)};
  const bool profiled = mode == filter_mode::profiled;
  if (profiled) {
    struct sigaction sa {};
    sa.sa_sigaction = report_denied_call;
    sa.sa_flags = SA_SIGINFO;
    if (::sigaction(SIGSYS, &sa, nullptr) != 0)
      return error{std::string("seccomp: cannot handle SIGSYS: ") + std::strerror(errno)};
  }
  const std::uint32_t kill = profiled ? SCMP_ACT_TRAP : SCMP_ACT_KILL_PROCESS;
  for (const char* name : killed)
    if (auto st = add(ctx.get(), name, kill); !st) return st;
  if (!profiled)
    for (const char* name : network)
      if (auto st = add(ctx.get(), name, kill); !st) return st;
  // Threads (CLONE_THREAD) stay: the CUDA runtime and torch start theirs when they need them.
  if (auto st = add(ctx.get(), "clone", kill, 1, SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0)); !st) return st;
  if (auto st = add(ctx.get(), "clone3", SCMP_ACT_ERRNO(ENOSYS)); !st) return st;
  // Signals only to this process (raise, abort and torch's own use pass).
  const auto self = static_cast<scmp_datum_t>(::getpid());
  for (const char* name : {"kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo"})
    if (auto st = add(ctx.get(), name, kill, 1, SCMP_A0(SCMP_CMP_NE, self)); !st) return st;
  if (const int rc = seccomp_load(ctx.get()); rc != 0)
    return error{std::string("seccomp_load: ") + std::strerror(-rc)};
  return {};
}

}  // namespace kforge::sandbox

#pragma once
// OS confinement of a child program that runs code we do not trust (the sandbox's candidate
// children, child_process.hpp): namespaces of its own (user, mount, PID, network, IPC); inside
// them a root built of read-only views of what the program needs, writable views of its scratch
// directory, and private /tmp, /dev/shm and /proc; an unprivileged user; no_new_privs; and death
// when the process that started it dies. The seccomp filter is the program's own business: it is
// installed after the program has initialised what it needs (sandbox/seccomp_filter.hpp).
//
// What a host cannot grant (no user namespaces in a container, say) is found once per process by
// probe_confinement, turned off, and named, so a sandbox can say what it runs without.
#include <sys/types.h>

#include <string>
#include <vector>

#include "common/result.hpp"

namespace kforge {

struct confinement {
  /// A user namespace: the child runs as confined_uid() and holds no capability outside it.
  bool user = true;
  /// A mount namespace whose root is built on `root` from the paths below.
  bool mount = true;
  /// A PID namespace: it sees no other process, and whatever it starts dies with it.
  bool pid = true;
  /// A network namespace with nothing but a loopback that is down.
  bool net = true;
  /// With `net`: that loopback brought up, still with no route out of the namespace. For ncu,
  /// whose frontend talks to the process it profiles over 127.0.0.1 (sandbox/ncu_profiler.hpp).
  bool loopback_up = false;
  /// System V IPC and POSIX message queues of its own.
  bool ipc = true;
  /// With `pid`: a /proc of its own namespace; false: the host's /proc read-only (a host whose
  /// /proc has masked entries refuses a new one to a user namespace).
  bool own_proc = true;
  /// An empty directory the new root is built on (in the child's mount namespace only).
  std::string root;
  /// Host paths seen read-only at the same place; a missing one is skipped. A top-level symbolic
  /// link (/lib -> usr/lib) is made again as a link.
  std::vector<std::string> read_only;
  /// Host paths seen writable at the same place (the child's scratch directory).
  std::vector<std::string> writable;

  /// Whether anything is confined at all.
  bool any() const noexcept { return user || mount || pid || net || ipc; }
};

/// The unprivileged user a confined child runs as: nobody (65534) when we are root (with or without
/// a user namespace), else ourselves (a user namespace maps only our own id then).
uid_t confined_uid() noexcept;
gid_t confined_gid() noexcept;

/// The paths a program needs to run inside a confined root: the system's (/usr, /etc, /sys,
/// /lib*, ...), the program's own directory, every LD_LIBRARY_PATH entry and the folder of every
/// library this process loaded.
std::vector<std::string> system_read_only_paths(const std::string& program);

/// What this host grants of `wanted`: the pieces that did not work in a short-lived test child
/// are turned off in `granted` and named, with why, in `missing`.
struct confinement_support {
  confinement granted;
  std::vector<std::string> missing;
};
confinement_support probe_confinement(const confinement& wanted);

/// "user, mount, pid, net, ipc namespaces, own /proc" or "none".
std::string describe(const confinement& c);

namespace detail {

/// Everything a confined child does between clone and exec, prepared before the clone so that
/// the child only makes system calls (no allocation: the parent may be multithreaded).
class confinement_plan {
 public:
  explicit confinement_plan(const confinement& c);
  /// CLONE_NEW* flags for the clone.
  int clone_flags() const noexcept;
  /// In the parent, after the clone: the child's user and group maps (user namespace only).
  status map_ids(pid_t child) const;
  /// In the child, once the parent has mapped its ids: the new root, the unprivileged user,
  /// no_new_privs, the death signal. nullptr when done, else what failed (errno says why).
  /// Async-signal-safe.
  const char* enter(pid_t parent) const noexcept;

 private:
  enum class op { make_dir, make_file, make_link, bind_read_only, bind_writable, bind_device, tmpfs, proc };
  struct step {
    op what;
    std::string target;  ///< inside the new root
    std::string source;  ///< the host path, link text, or tmpfs options
    std::string failure; ///< what enter() reports when this step fails
  };
  void add_path(const std::string& host, bool writable);
  void add_dirs(const std::string& path);
  void add_devices();
  const char* run(const step& s) const noexcept;

  confinement c_;
  std::vector<step> steps_;
  std::vector<std::string> made_dirs_;
  std::string old_root_;
};

/// Starts a confined child: cloned like fork() with the plan's namespaces, from one thread of this
/// process that never ends (a child's death signal, PR_SET_PDEATHSIG, follows the thread that
/// started it, and a pool thread that ends must not take its children along), its ids mapped, then
/// released. The child enters the plan; if that fails it writes "cannot confine the child: STEP:
/// REASON" and a newline to `report_fd` and exits 1, else it runs `then(arg)`, which must not
/// return. The child's pid, or why it could not be started (a child that was is reaped first).
result<pid_t> start_confined(const confinement_plan& plan, int report_fd, void (*then)(void*), void* arg);

}  // namespace detail
}  // namespace kforge

#include "common/confinement.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <link.h>
#include <net/if.h>
#include <netinet/in.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <mutex>
#include <sstream>
#include <thread>

namespace kforge {

namespace fs = std::filesystem;

uid_t confined_uid() noexcept { return ::geteuid() == 0 ? 65534 : ::geteuid(); }
gid_t confined_gid() noexcept { return ::geteuid() == 0 ? 65534 : ::getegid(); }

std::vector<std::string> system_read_only_paths(const std::string& program) {
  // /sys and /run/nvidia-persistenced: the CUDA driver reads the PCI topology and may ask the
  // persistence daemon; /etc: the dynamic loader's cache.
  std::vector<std::string> paths = {"/usr", "/etc", "/sys", "/opt", "/bin", "/sbin", "/lib", "/lib64",
                                    "/lib32", "/libx32", "/run/nvidia-persistenced"};
  std::vector<std::string> more;
  std::error_code ec;
  const auto exe = fs::canonical(program, ec);
  if (!ec) more.push_back(exe.parent_path().string());
  if (const char* ld = std::getenv("LD_LIBRARY_PATH")) {
    std::stringstream ss(ld);
    for (std::string dir; std::getline(ss, dir, ':');)
      if (!dir.empty() && dir.front() == '/') more.push_back(dir);
  }
  // The folders of the libraries this process loaded: the sandbox's children run kforge itself,
  // and the libraries it finds by RPATH (a packed dependency folder, pip's LibTorch) are on no
  // list above.
  ::dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* out) {
        const std::string name = info->dlpi_name ? info->dlpi_name : "";
        if (!name.empty() && name.front() == '/')
          static_cast<std::vector<std::string>*>(out)->push_back(fs::path(name).parent_path().string());
        return 0;
      },
      &more);
  std::sort(more.begin(), more.end());
  more.erase(std::unique(more.begin(), more.end()), more.end());
  paths.insert(paths.end(), more.begin(), more.end());
  return paths;
}

std::string describe(const confinement& c) {
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (on) s += (s.empty() ? "" : ", ") + std::string(name);
  };
  add(c.user, "user");
  add(c.mount, "mount");
  add(c.pid, "pid");
  add(c.net, "net");
  add(c.ipc, "ipc");
  if (s.empty()) return "none";
  s += " namespaces";
  if (c.mount) s += ", read-only root";
  if (c.pid && c.mount && c.own_proc) s += ", own /proc";
  return s;
}

namespace detail {

namespace {

bool under(const std::string& path, const std::string& dir) {
  return path == dir || (path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 &&
                         (dir.back() == '/' || path[dir.size()] == '/'));
}

// Read-only again over a bind mount, keeping the flags a user namespace may not drop (a mount
// inherited from a more privileged namespace has them locked).
int remount_read_only(const char* target) noexcept {
  struct statvfs sv {};
  if (::statvfs(target, &sv) != 0) return -1;
  unsigned long flags = MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID;
  if (sv.f_flag & ST_NODEV) flags |= MS_NODEV;
  if (sv.f_flag & ST_NOEXEC) flags |= MS_NOEXEC;
  if (sv.f_flag & ST_NOATIME) flags |= MS_NOATIME;
  if (sv.f_flag & ST_NODIRATIME) flags |= MS_NODIRATIME;
  if (sv.f_flag & ST_RELATIME) flags |= MS_RELATIME;
  return ::mount(nullptr, target, nullptr, flags, nullptr);
}

bool write_text(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok;
}

}  // namespace

confinement_plan::confinement_plan(const confinement& c) : c_(c) {
  if (!c_.mount || c_.root.empty()) {
    c_.mount = false;
    return;
  }
  const std::string& r = c_.root;
  steps_.push_back({op::tmpfs, r, "size=16m,mode=0755", "a tmpfs for the new root"});
  add_devices();
  add_dirs("/tmp");
  steps_.push_back({op::tmpfs, r + "/tmp", "size=64m,mode=1777", "a private /tmp"});
  std::vector<std::string> done;
  for (const auto& p : c_.read_only) {
    if (std::any_of(done.begin(), done.end(), [&](const std::string& d) { return under(p, d); })) continue;
    add_path(p, false);
    done.push_back(p);
  }
  for (const auto& p : c_.writable) add_path(p, true);
  add_dirs("/proc");
  if (c_.pid && c_.own_proc)
    steps_.push_back({op::proc, r + "/proc", "", "a /proc of its own"});
  else
    steps_.push_back({op::bind_read_only, r + "/proc", "/proc", "the host's /proc, read-only"});
  old_root_ = r + "/.old";
  steps_.push_back({op::make_dir, old_root_, "", "the old root's mount point"});
}

void confinement_plan::add_dirs(const std::string& path) {
  std::string sofar;
  std::stringstream ss(path);
  for (std::string part; std::getline(ss, part, '/');) {
    if (part.empty()) continue;
    sofar += "/" + part;
    if (std::find(made_dirs_.begin(), made_dirs_.end(), sofar) != made_dirs_.end()) continue;
    made_dirs_.push_back(sofar);
    steps_.push_back({op::make_dir, c_.root + sofar, "", "a directory of the new root"});
  }
}

void confinement_plan::add_path(const std::string& host, bool writable) {
  struct stat st {};
  if (host.empty() || host.front() != '/' || ::lstat(host.c_str(), &st) != 0) return;
  if (S_ISLNK(st.st_mode) && host.find('/', 1) == std::string::npos) {
    char text[4096];
    const ssize_t n = ::readlink(host.c_str(), text, sizeof text - 1);
    if (n <= 0) return;
    steps_.push_back({op::make_link, c_.root + host, std::string(text, static_cast<std::size_t>(n)),
                      "a link of the new root"});
    return;
  }
  std::error_code ec;
  const std::string real = fs::canonical(host, ec).string();
  if (ec || ::stat(real.c_str(), &st) != 0) return;
  const op bind = writable ? op::bind_writable : op::bind_read_only;
  if (S_ISDIR(st.st_mode)) {
    add_dirs(host);
  } else {
    add_dirs(fs::path(host).parent_path().string());
    steps_.push_back({op::make_file, c_.root + host, "", "a file of the new root"});
  }
  steps_.push_back({bind, c_.root + host, real, "a view of " + host});
}

void confinement_plan::add_devices() {
  const std::string dev = c_.root + "/dev";
  add_dirs("/dev");
  steps_.push_back({op::tmpfs, dev, "size=1m,mode=0755", "a private /dev"});
  // The usual character devices and the GPU's (nvidiactl, nvidia0.., nvidia-uvm, nvidia-caps/).
  if (DIR* d = ::opendir("/dev")) {
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      const bool wanted = name == "null" || name == "zero" || name == "full" || name == "random" ||
                          name == "urandom" || name.rfind("nvidia", 0) == 0;
      struct stat st {};
      if (!wanted || ::stat(("/dev/" + name).c_str(), &st) != 0) continue;
      if (S_ISCHR(st.st_mode)) {
        steps_.push_back({op::make_file, dev + "/" + name, "", "a device node"});
        steps_.push_back({op::bind_device, dev + "/" + name, "/dev/" + name, "a view of /dev/" + name});
      } else if (S_ISDIR(st.st_mode)) {
        steps_.push_back({op::make_dir, dev + "/" + name, "", "a device directory"});
        steps_.push_back({op::bind_device, dev + "/" + name, "/dev/" + name, "a view of /dev/" + name});
      }
    }
    ::closedir(d);
  }
  for (const char* fd_link : {"fd", "stdin", "stdout", "stderr"}) {
    const std::string target = std::string(fd_link) == "fd" ? "/proc/self/fd"
                               : std::string("/proc/self/fd/") +
                                     (std::string(fd_link) == "stdin" ? "0" : std::string(fd_link) == "stdout" ? "1" : "2");
    steps_.push_back({op::make_link, dev + "/" + fd_link, target, "a link in /dev"});
  }
  made_dirs_.push_back("/dev/shm");
  steps_.push_back({op::make_dir, dev + "/shm", "", "/dev/shm"});
  steps_.push_back({op::tmpfs, dev + "/shm", "size=256m,mode=1777", "a private /dev/shm"});
}

int confinement_plan::clone_flags() const noexcept {
  return (c_.user ? CLONE_NEWUSER : 0) | (c_.mount ? CLONE_NEWNS : 0) | (c_.pid ? CLONE_NEWPID : 0) |
         (c_.net ? CLONE_NEWNET : 0) | (c_.ipc ? CLONE_NEWIPC : 0);
}

status confinement_plan::map_ids(pid_t child) const {
  if (!c_.user) return {};
  const std::string proc = "/proc/" + std::to_string(child);
  const std::string uid = std::to_string(confined_uid()), gid = std::to_string(confined_gid());
  // Only a privileged parent may let the child drop its supplementary groups (setgroups).
  if (::geteuid() != 0 && !write_text(proc + "/setgroups", "deny"))
    return error{"cannot deny setgroups to the confined child: " + std::string(std::strerror(errno))};
  if (!write_text(proc + "/uid_map", uid + " " + uid + " 1\n"))
    return error{"cannot write the confined child's uid_map: " + std::string(std::strerror(errno))};
  if (!write_text(proc + "/gid_map", gid + " " + gid + " 1\n"))
    return error{"cannot write the confined child's gid_map: " + std::string(std::strerror(errno))};
  return {};
}

const char* confinement_plan::run(const step& s) const noexcept {
  const char* t = s.target.c_str();
  const char* src = s.source.c_str();
  int rc = 0;
  switch (s.what) {
    case op::make_dir:
      rc = ::mkdir(t, 0755);
      if (rc != 0 && errno == EEXIST) rc = 0;
      break;
    case op::make_file: {
      const int fd = ::open(t, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
      rc = fd < 0 ? -1 : ::close(fd);
      break;
    }
    case op::make_link:
      rc = ::symlink(src, t);
      break;
    case op::tmpfs:
      rc = ::mount("tmpfs", t, "tmpfs", MS_NOSUID, src);
      break;
    case op::proc:
      rc = ::mount("proc", t, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr);
      break;
    case op::bind_read_only:
      rc = ::mount(src, t, nullptr, MS_BIND | MS_REC, nullptr);
      if (rc == 0) rc = remount_read_only(t);
      break;
    case op::bind_writable:
    case op::bind_device:
      rc = ::mount(src, t, nullptr, MS_BIND | MS_REC, nullptr);
      break;
  }
  return rc == 0 ? nullptr : s.failure.c_str();
}

namespace {

// Runs in the child of a raw clone() of a threaded process, so it makes the system calls itself:
// glibc's setgroups/setresgid/setresuid broadcast the change to every thread glibc knows of and wait
// for each, and a thread that was being created in the parent at the clone never answers (such
// children hung until the supervisor's 120 s hello timeout). The child has one thread; the raw
// calls change it alone, which is all of it.
const char* become_unprivileged() noexcept {
  // setgroups is refused (and not needed) where the parent was unprivileged.
  (void)::syscall(SYS_setgroups, 0, nullptr);
  const gid_t g = confined_gid();
  const uid_t u = confined_uid();
  if (::syscall(SYS_setresgid, g, g, g) != 0) return "the unprivileged group";
  if (::syscall(SYS_setresuid, u, u, u) != 0) return "the unprivileged user";
  return nullptr;
}

// The new network namespace's loopback up (SIOCSIFFLAGS needs CAP_NET_ADMIN in the namespace's
// user namespace, which the child holds until exec, or root's own).
const char* bring_loopback_up() noexcept {
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "a socket to bring the loopback up";
  struct ifreq ifr {};
  std::memcpy(ifr.ifr_name, "lo", 3);
  int rc = ::ioctl(fd, SIOCGIFFLAGS, &ifr);
  if (rc == 0) {
    ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP);
    rc = ::ioctl(fd, SIOCSIFFLAGS, &ifr);
  }
  ::close(fd);
  return rc == 0 ? nullptr : "bringing the loopback up";
}

}  // namespace

const char* confinement_plan::enter(pid_t parent) const noexcept {
  // In a user namespace the unprivileged user comes first: files made in the new root's tmpfs must
  // belong to a user the namespace maps, and its capabilities there stay until exec (it was never
  // the namespace's root). Without one, a root parent's child drops to nobody after the mounts.
  const bool root_without_user_ns = !c_.user && ::geteuid() == 0;
  if (c_.user)
    if (const char* bad = become_unprivileged()) return bad;
  if (c_.mount) {
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return "private mounts";
    for (const auto& s : steps_)
      if (const char* bad = run(s)) return bad;
    if (::syscall(SYS_pivot_root, c_.root.c_str(), old_root_.c_str()) != 0) return "pivot_root";
    if (::chdir("/") != 0) return "entering the new root";
    if (::umount2("/.old", MNT_DETACH) != 0) return "detaching the old root";
    ::rmdir("/.old");
    if (remount_read_only("/") != 0) return "a read-only new root";
  }
  if (c_.net && c_.loopback_up)
    if (const char* bad = bring_loopback_up()) return bad;
  if (root_without_user_ns)
    if (const char* bad = become_unprivileged()) return bad;
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return "no_new_privs";
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) return "the death signal";
  // The parent may have died before the death signal was set (its PID is not ours to see in a
  // PID namespace: getppid() is 0 there).
  if (!c_.pid && ::getppid() != parent) ::_exit(1);
  return nullptr;
}

// ---- the lasting thread that starts confined children ----

namespace {

struct clone_job {
  int flags;
  void (*child)(void*);
  void* arg;
  pid_t pid = -1;
  int error = 0;
  bool done = false;
};

// Never destroyed: the thread waits on them until the process ends (a condition variable destroyed
// at exit with a waiter would hang the exit).
struct clone_queue {
  std::mutex mutex;
  std::condition_variable cv;
  std::deque<clone_job*> jobs;
};
clone_queue& queue() {
  static auto* q = new clone_queue;
  return *q;
}

void serve_clone_jobs() {
  clone_queue& q = queue();
  for (;;) {
    clone_job* job = nullptr;
    {
      std::unique_lock lock(q.mutex);
      q.cv.wait(lock, [&] { return !q.jobs.empty(); });
      job = q.jobs.front();
      q.jobs.pop_front();
    }
    // Like fork(): the child runs on a copy of this thread's stack.
    const long pid = ::syscall(SYS_clone, static_cast<unsigned long>(job->flags) | SIGCHLD, nullptr, nullptr,
                               nullptr, nullptr);
    if (pid == 0) {
      job->child(job->arg);
      ::_exit(127);
    }
    const int err = errno;
    {
      std::lock_guard lock(q.mutex);
      job->pid = static_cast<pid_t>(pid);
      job->error = err;
      job->done = true;
    }
    q.cv.notify_all();
  }
}

// Like fork() with `flags` added, from the lasting thread; the pid, or -1 with errno.
pid_t clone_from_lasting_thread(int flags, void (*child)(void*), void* arg) {
  static std::once_flag started;
  std::call_once(started, [] { std::thread(serve_clone_jobs).detach(); });
  clone_queue& q = queue();
  clone_job job{flags, child, arg};
  std::unique_lock lock(q.mutex);
  q.jobs.push_back(&job);
  q.cv.notify_all();
  q.cv.wait(lock, [&] { return job.done; });
  errno = job.error;
  return job.pid;
}

struct confined_start {
  const confinement_plan* plan;
  int released;  ///< readable once the parent has mapped the child's ids (EOF: it could not)
  int report;
  pid_t parent;
  void (*then)(void*);
  void* arg;
};

void enter_then(void* p) {
  const auto& s = *static_cast<const confined_start*>(p);
  char go = 0;
  if (::read(s.released, &go, 1) != 1) ::_exit(1);
  if (const char* bad = s.plan->enter(s.parent)) {
    const char* why = std::strerror(errno);
    for (const char* piece : {"cannot confine the child: ", bad, ": ", why, "\n"})
      (void)!::write(s.report, piece, std::strlen(piece));
    ::_exit(1);
  }
  s.then(s.arg);
  ::_exit(127);
}

}  // namespace

result<pid_t> start_confined(const confinement_plan& plan, int report_fd, void (*then)(void*), void* arg) {
  int release[2];
  if (::pipe2(release, O_CLOEXEC) != 0) return error{std::string("pipe: ") + std::strerror(errno)};
  confined_start s{&plan, release[0], report_fd, ::getpid(), then, arg};
  const pid_t pid = clone_from_lasting_thread(plan.clone_flags(), enter_then, &s);
  const int clone_errno = errno;
  ::close(release[0]);
  auto mapped = pid < 0 ? status{} : plan.map_ids(pid);
  if (pid > 0 && mapped && ::write(release[1], "g", 1) != 1) mapped = error{"cannot release the confined child"};
  ::close(release[1]);  // an unreleased child reads EOF and exits
  if (pid < 0) return error{std::string("clone: ") + std::strerror(clone_errno)};
  if (!mapped) {
    int st = 0;
    while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    return error{mapped.err().message};
  }
  return pid;
}

}  // namespace detail

// ---- what the host grants ----

namespace {

// One try of `c` in a child that enters it and exits: "" when it worked, else what failed.
std::string try_confinement(const confinement& c) {
  const detail::confinement_plan plan(c);
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) return std::string("pipe: ") + std::strerror(errno);
  auto pid = detail::start_confined(plan, report[1], [](void*) { ::_exit(0); }, nullptr);
  ::close(report[1]);
  std::string failure;
  if (!pid) {
    failure = pid.err().message;
  } else {
    char buf[512];
    for (ssize_t n; (n = ::read(report[0], buf, sizeof buf)) > 0;) failure.append(buf, static_cast<std::size_t>(n));
    int st = 0;
    while (::waitpid(*pid, &st, 0) < 0 && errno == EINTR) {
    }
    if (failure.empty() && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) failure = "the test child did not finish";
  }
  ::close(report[0]);
  const std::string prefix = "cannot confine the child: ";
  if (failure.rfind(prefix, 0) == 0) failure.erase(0, prefix.size());
  while (!failure.empty() && failure.back() == '\n') failure.pop_back();
  return failure;
}

}  // namespace

confinement_support probe_confinement(const confinement& wanted) {
  confinement_support s;
  s.granted = wanted;
  confinement& g = s.granted;
  char templ[] = "/tmp/kforge-confine-probe-XXXXXX";
  const bool have_root = ::mkdtemp(templ) != nullptr;
  if (g.mount && !have_root) {
    g.mount = false;
    s.missing.push_back("a root of its own: no directory to build it on");
  }
  const std::string real_root = g.root;
  if (have_root) g.root = templ;
  // Each failure turns off the piece it points at, until what is left works (at most a few tries).
  for (int attempt = 0; attempt < 6 && g.any(); ++attempt) {
    const std::string failed = try_confinement(g);
    if (failed.empty()) break;
    if (failed.rfind("clone", 0) == 0 || failed.find("_map") != std::string::npos) {
      if (g.user) {
        g.user = false;
        s.missing.push_back("user namespace: " + failed);
      } else {
        g.mount = g.pid = g.net = g.ipc = false;
        s.missing.push_back("mount, pid, net and ipc namespaces: " + failed);
      }
    } else if (failed.rfind("a /proc of its own", 0) == 0) {
      g.own_proc = false;
      s.missing.push_back("a /proc of its own (the host's is seen read-only): " + failed);
    } else if (failed.rfind("the unprivileged", 0) == 0) {
      g.user = false;
      s.missing.push_back("an unprivileged user: " + failed);
    } else {
      g.mount = false;
      s.missing.push_back("a read-only root of its own: " + failed);
    }
  }
  if (have_root) {
    std::error_code ec;
    fs::remove_all(templ, ec);
  }
  g.root = real_root;
  return s;
}

}  // namespace kforge

// The OS confinement of untrusted children (common/confinement.hpp), on this host: every piece the
// host grants is checked from inside a child started with it (a shell that reports what it could
// do); every piece it does not grant must be named by probe_confinement.
#include <dlfcn.h>
#include <doctest/doctest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "common/child_process.hpp"
#include "common/confinement.hpp"

namespace fs = std::filesystem;
using kforge::confinement;

namespace {

const kforge::confinement_support& support() {
  static const auto s = kforge::probe_confinement(confinement{});
  return s;
}

bool missing(const char* piece) {
  for (const auto& m : support().missing)
    if (m.find(piece) != std::string::npos) return true;
  return false;
}

// A scratch folder laid out as the sandbox does (a mount point for the root, a work folder the
// confined user owns), removed at the end.
struct scratch {
  std::string dir, work, root;
  scratch() {
    char templ[] = "/tmp/kforge-confine-test-XXXXXX";
    REQUIRE(::mkdtemp(templ) != nullptr);
    dir = templ;
    work = dir + "/work";
    root = dir + "/.root";
    ::chmod(dir.c_str(), 0711);
    ::mkdir(work.c_str(), 0700);
    ::mkdir(root.c_str(), 0700);
    if (::geteuid() == 0) REQUIRE(::chown(work.c_str(), kforge::confined_uid(), kforge::confined_gid()) == 0);
  }
  ~scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

// Starts bash with `script` confined as granted here, in `s`; the script reads one request line
// from fd 3 and must answer with one line. The child is returned running, with its reply.
std::pair<kforge::child_process, std::string> run_confined(const scratch& s, const std::string& script,
                                                          const std::string& also_read_only = {},
                                                          bool loopback_up = false) {
  confinement c = support().granted;
  c.loopback_up = loopback_up;
  c.root = s.root;
  c.read_only = kforge::system_read_only_paths("/bin/bash");
  if (!also_read_only.empty()) c.read_only.push_back(also_read_only);
  c.writable = {s.work};
  kforge::child_options o;
  o.working_dir = s.work;
  o.confine = c;
  o.scrub_env = true;
  o.keep_env = {"PATH"};
  auto child = kforge::child_process::start({"/bin/bash", "-c", "read -r request <&3; " + script}, o);
  REQUIRE_MESSAGE(child.ok(), (child.ok() ? "" : child.message()));
  const auto reply = child->request("{}", std::chrono::seconds(20));
  INFO("output: " << child->take_output());
  REQUIRE_MESSAGE(reply.failure == kforge::child_failure::none, reply.detail);
  return {std::move(*child), reply.json};
}

// The value of "key" in a flat JSON line of strings the scripts below write.
std::string field(const std::string& json, const std::string& key) {
  const auto at = json.find("\"" + key + "\":\"");
  if (at == std::string::npos) return "?";
  const auto begin = at + key.size() + 4;
  return json.substr(begin, json.find('"', begin) - begin);
}

bool process_named(const std::string& name) {
  for (const auto& e : fs::directory_iterator("/proc")) {
    std::ifstream in(e.path() / "cmdline");
    std::string cmd;
    std::getline(in, cmd, '\0');
    if (cmd == name) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("a confined root shows the folders of the libraries this process loaded") {
  // A library found by RPATH (a packed dependency folder) is on no system list; without its folder
  // the confined child cannot load it.
  Dl_info info{};
  REQUIRE(::dladdr(reinterpret_cast<void*>(&::getpid), &info) != 0);
  const auto libc_dir = std::filesystem::path(info.dli_fname).parent_path().string();
  const auto paths = kforge::system_read_only_paths("/bin/bash");
  CHECK(std::find(paths.begin(), paths.end(), libc_dir) != paths.end());
}

TEST_CASE("probe_confinement grants each piece or names why not") {
  const auto& s = support();
  MESSAGE("granted here: " << kforge::describe(s.granted));
  for (const auto& m : s.missing) MESSAGE("not granted here: " << m);
  CHECK((s.granted.user || missing("user")));
  CHECK((s.granted.mount || missing("root")));
  CHECK((s.granted.pid || missing("pid")));
  CHECK((s.granted.net || missing("net")));
  CHECK((s.granted.own_proc || missing("/proc")));
  CHECK(kforge::describe(confinement{}) == "user, mount, pid, net, ipc namespaces, read-only root, own /proc");
  confinement none;
  none.user = none.mount = none.pid = none.net = none.ipc = false;
  CHECK(kforge::describe(none) == "none");
}

TEST_CASE("a confined child sees and touches only what it is given") {
  const auto& g = support().granted;
  if (!g.any()) {
    MESSAGE("SKIP: this host grants no confinement (see the test above for why)");
    return;
  }
  scratch s;
  // Outside the child's view: a secret to read; a folder anyone may write into, which the child
  // is shown read-only.
  const std::string secret = s.dir + "-secret";
  const std::string outside = s.dir + "-outside";
  std::ofstream(secret) << "hunter2";
  ::chmod(secret.c_str(), 0644);
  fs::create_directories(outside);
  ::chmod(outside.c_str(), 0777);
  const auto [child, reply] = run_confined(
      s, "uid=$(id -u); procs=$(ls /proc | grep -c '^[0-9]'); nets=$(tail -n +3 /proc/net/dev | wc -l); "
         "secret=$(cat " + secret + " 2>/dev/null); "
         "touch " + outside + "/x 2>/dev/null && out=yes || out=no; touch /usr/x 2>/dev/null && usr=yes || usr=no; "
         "touch $PWD/w && work=yes || work=no; "
         "echo \"{\\\"uid\\\":\\\"$uid\\\",\\\"procs\\\":\\\"$procs\\\",\\\"nets\\\":\\\"$nets\\\",\\\"secret\\\":\\\"$secret\\\","
         "\\\"out\\\":\\\"$out\\\",\\\"usr\\\":\\\"$usr\\\",\\\"work\\\":\\\"$work\\\"}\" >&3",
      outside);
  INFO(reply);
  CHECK(field(reply, "work") == "yes");  // its own folder stays writable
  if (g.user) CHECK(field(reply, "uid") == std::to_string(kforge::confined_uid()));
  if (g.mount) {
    CHECK(field(reply, "out") == "no");
    CHECK_FALSE(fs::exists(outside + "/x"));
    CHECK(field(reply, "usr") == "no");
    CHECK(field(reply, "secret").empty());
  }
  if (g.pid && g.mount && g.own_proc) CHECK(std::stoi(field(reply, "procs")) <= 6);  // bash and its pipes
  if (g.net && g.mount && g.own_proc) CHECK(field(reply, "nets") == "1");  // lo alone
  fs::remove(secret);
  fs::remove_all(outside);
}

TEST_CASE("a confined child's loopback is down unless asked for up (ncu's connection needs it)") {
  if (!support().granted.net) {
    MESSAGE("SKIP: this host grants no network namespace");
    return;
  }
  // Connecting to a closed port on 127.0.0.1: "Network is unreachable" with the loopback down,
  // "Connection refused" with it up. Nothing outside the namespace is reachable either way.
  const std::string probe =
      "if (exec 4<>/dev/tcp/127.0.0.1/9) 2>&1 | grep -q refused; then lo=up; else lo=down; fi; "
      "echo \"{\\\"lo\\\":\\\"$lo\\\"}\" >&3";
  scratch a, b;
  CHECK(field(run_confined(a, probe).second, "lo") == "down");
  CHECK(field(run_confined(b, probe, {}, true).second, "lo") == "up");
}

TEST_CASE("whatever a confined child starts dies with it") {
  if (!support().granted.pid) {
    MESSAGE("SKIP: no PID namespace here (see the first test for why)");
    return;
  }
  scratch s;
  const std::string name = "kforge-confine-survivor-" + std::to_string(::getpid());
  auto [child, reply] =
      run_confined(s, "(setsid bash -c 'exec -a " + name + " sleep 300' &); sleep 0.2; echo '{\"ok\":true}' >&3");
  CHECK(reply == "{\"ok\":true}");
  child.kill();
  bool gone = false;
  for (int i = 0; i < 50 && !gone; ++i) {
    gone = !process_named(name);
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK(gone);
}

TEST_CASE("confined children start while other threads of the parent come and go") {
  // The sandbox starts children from a process whose threads start and end all the time (one per
  // candidate in flight). A child that ran glibc's credential calls after the clone could wait
  // forever for a thread that was being created at that instant.
  const auto& g = support().granted;
  if (!g.user) {
    MESSAGE("SKIP: this host grants no user namespace (see the test above for why)");
    return;
  }
  std::atomic<bool> stop{false};
  std::thread churn([&] {
    while (!stop.load()) std::thread([] {}).join();
  });
  confinement c;
  c.mount = c.pid = c.net = c.ipc = false;  // the credential change is what is under test
  kforge::child_options o;
  o.confine = c;
  int answered = 0;
  const int children = 150;
  for (int i = 0; i < children; ++i) {
    auto child = kforge::child_process::start({"/bin/sh", "-c", "read -r r <&3; echo '{}' >&3"}, o);
    REQUIRE(child.ok());
    if (child->request("{}", std::chrono::seconds(5)).failure == kforge::child_failure::none) ++answered;
  }
  stop = true;
  churn.join();
  CHECK(answered == children);
}

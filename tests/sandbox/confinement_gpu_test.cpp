// GPU: the confinement attack set (confinement/attacks.jsonl) through the real sandbox with the
// static checks turned off, so the OS confinement of the candidate child (namespaces, the
// read-only root, the unprivileged user, seccomp) and the nonce-checked channel are all that stand
// between each attack and its goal. Each attack writes a correct ReLU when it failed and zeros
// when it succeeded, so wrong_answer means it got through; besides, nothing it aimed at may have
// changed (a file outside its folder, a connection to our listener, a process left behind).
//
// A control pass runs the harmless attacks once more with the confinement off: they must succeed
// there, or this test shows nothing.
#include <doctest/doctest.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "common/confinement.hpp"
#include "sandbox/child_setup.hpp"
#include "sandbox/pool.hpp"
#include "sandbox/verdict_json.hpp"
#include "suite_manifest.hpp"
#include "tasks/builtin.hpp"

namespace fs = std::filesystem;
namespace ks = kforge::sandbox;
using json = nlohmann::json;

namespace {

const std::string attack_dir = std::string(KFORGE_TEST_DATA) + "/confinement";
constexpr const char* secret_path = "/tmp/kforge-confine-secret";
constexpr int listen_port = 47123;

struct attack {
  std::string file, name, marker, why;
};

std::vector<attack> load_attacks() {
  std::ifstream in(attack_dir + "/attacks.jsonl");
  REQUIRE_MESSAGE(in.good(), "cannot read " << attack_dir << "/attacks.jsonl");
  std::vector<attack> all;
  for (std::string line; std::getline(in, line);) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const auto j = json::parse(line);
    all.push_back({j.at("file"), j.at("attack"), j.value("marker", ""), j.value("why", "")});
  }
  return all;
}

// A TCP listener on 127.0.0.1:listen_port that counts the connections it was offered.
struct listener {
  int fd = -1;
  listener() {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(listen_port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(fd, 16) == 0);
  }
  ~listener() { ::close(fd); }
  int accepted() {
    int n = 0;
    for (int c; (c = ::accept(fd, nullptr, nullptr)) >= 0; ++n) ::close(c);
    return n;
  }
};

bool process_named(const std::string& comm) {
  for (const auto& e : fs::directory_iterator("/proc")) {
    std::ifstream in(e.path() / "comm");
    std::string name;
    if (std::getline(in, name) && name == comm) return true;
  }
  return false;
}

void kill_processes_named(const std::string& comm) {
  for (const auto& e : fs::directory_iterator("/proc")) {
    std::ifstream in(e.path() / "comm");
    std::string name;
    if (std::getline(in, name) && name == comm) ::kill(std::atoi(e.path().filename().c_str()), SIGKILL);
  }
}

// Whether the attack's target changed: its marker file exists or its marker process runs.
bool marker_present(const attack& a) {
  if (a.marker.empty()) return false;
  if (a.marker.front() == '/') return fs::exists(a.marker);
  return process_named(a.marker);
}

void clear_markers(const std::vector<attack>& attacks) {
  for (const auto& a : attacks) {
    if (a.marker.empty()) continue;
    if (a.marker.front() == '/') fs::remove(a.marker);
    else kill_processes_named(a.marker);
  }
}

std::unique_ptr<ks::sandbox_pool> attack_pool(const fs::path& cache, bool confine) {
  ks::pool_options po;
  po.eval.compile.cache_dir = cache;
  po.eval.static_checks = false;  // the point: confinement alone
  fs::create_directories(cache);
  po.work_dir = cache;
  po.run.program = KFORGE_BINARY;
  po.run.time_limit = std::chrono::milliseconds(15'000);
  po.run.confine = confine;
  po.gpus = {0};
  po.runners_per_gpu = 2;
  auto pool = ks::sandbox_pool::create(po);
  REQUIRE_MESSAGE(pool.ok(), (pool.ok() ? "" : pool.message()));
  return std::move(*pool);
}

}  // namespace

TEST_CASE("the confinement alone stops every host-side attack (static checks off)") {
  if (ks::visible_gpu_count() == 0) {
    std::printf("SKIP: no GPU visible (the confinement attacks need one; deploy/gpu-host.sh runs them)\n");
    std::exit(77);
  }
  const auto attacks = load_attacks();
  REQUIRE(attacks.size() >= 9);
  std::printf("sandbox: %s\n", ks::describe_candidate_confinement(true).c_str());
  auto library = kforge::tasks::builtin_tasks();
  REQUIRE(library.ok());
  const kforge::tasks::task* relu = nullptr;
  for (const auto& t : *library)
    if (t.id == "l1/relu") relu = &t;
  REQUIRE(relu != nullptr);
  std::ofstream(secret_path) << "kforge-confine-secret\n";
  listener net;
  clear_markers(attacks);
  const fs::path cache = fs::temp_directory_path() / "kforge-confine-cache";

  auto pool = attack_pool(cache / "confined", true);
  std::printf("%-28s %-16s %s\n", "attack", "verdict", "reason");
  for (const auto& a : attacks) {
    const auto v = ks::verdict_json(
        pool->evaluate(*relu, ks::testing::read_file(attack_dir + "/" + a.file), 4321));
    const std::string got = v.value("status", "?");
    std::printf("%-28s %-16s %.160s\n", a.name.c_str(), got.c_str(), v.value("reason", "").c_str());
    INFO(a.file << ": " << v.dump());
    if (a.name == "forge_reply")
      CHECK(got == "hack_suspected");
    else
      CHECK((got == "ok" || got == "hack_suspected"));
    CHECK_FALSE(marker_present(a));
  }
  CHECK(net.accepted() == 0);
  pool.reset();  // every child ends: nothing of theirs may live on
  for (const auto& a : attacks) CHECK_MESSAGE(!marker_present(a), a.name << " left " << a.marker);

  // The control: without the confinement the harmless attacks get through (wrong_answer), so the
  // verdicts above are the confinement's doing.
  const std::set<std::string> harmless = {"write_file", "read_proc", "network", "signal", "fork", "exec",
                                          "read_secret"};
  auto open_pool = attack_pool(cache / "open", false);
  for (const auto& a : attacks) {
    if (!harmless.count(a.name)) continue;
    const auto v = ks::verdict_json(
        open_pool->evaluate(*relu, ks::testing::read_file(attack_dir + "/" + a.file), 4321));
    std::printf("unconfined %-17s %-16s %.160s\n", a.name.c_str(), v.value("status", "?").c_str(),
                v.value("reason", "").c_str());
    CHECK_MESSAGE(v.value("status", "") == "wrong_answer", a.name << " did not get through unconfined: " << v.dump());
  }
  CHECK(net.accepted() >= 1);
  clear_markers(attacks);
  fs::remove(secret_path);
  fs::remove_all(cache);
}

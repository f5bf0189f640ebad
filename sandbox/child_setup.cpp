#include "sandbox/child_setup.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/file_writer.hpp"
#include "common/text_file.hpp"
#include "common/visible_gpus.hpp"
#include "sandbox/runner.hpp"

namespace kforge::sandbox {

child_options sandbox_child_options(const run_options& o, const std::string& dir) {
  child_options c;
  c.working_dir = dir;
  c.scrub_env = true;
  // What the dynamic loader and the CUDA driver need to find their libraries; nothing else of ours.
  c.keep_env = {"PATH", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH"};
  c.env = {{"CUDA_VISIBLE_DEVICES", physical_gpu(o.gpu)},
           {"HOME", dir},
           {"TMPDIR", dir},
           {"OMP_NUM_THREADS", "1"}};
  c.file_size_bytes = std::uint64_t{16} << 30;  // output files of the largest tasks fit
  c.cpu_seconds = 3600;                          // a backstop; children are recycled long before
  c.processes = 8192;                            // fork is rejected statically; this is a backstop
  c.max_output = o.max_output;
  c.reply_nonce = true;
  return c;
}

const confinement_support& candidate_confinement(bool wanted) {
  static const confinement_support all = probe_confinement(confinement{});
  static const confinement_support none = [] {
    confinement_support s;
    s.granted.user = s.granted.mount = s.granted.pid = s.granted.net = s.granted.ipc = false;
    s.missing.push_back("every piece: turned off (sandbox.confine = false)");
    return s;
  }();
  return wanted ? all : none;
}

std::string describe_candidate_confinement(bool wanted) {
  const auto& s = candidate_confinement(wanted);
  std::string line = "confinement: " + describe(s.granted);
  if (wanted) line += ", uid " + std::to_string(confined_uid()) + ", no_new_privs, seccomp filter";
  if (!s.missing.empty()) {
    line += "; not granted here:";
    for (const auto& m : s.missing) line += " " + m + ";";
    line.pop_back();
  }
  return line;
}

namespace {

status make_dir(const std::string& path, mode_t mode) {
  if (::mkdir(path.c_str(), mode) != 0 && errno != EEXIST)
    return error{"cannot create " + path + ": " + std::strerror(errno)};
  if (::chmod(path.c_str(), mode) != 0) return error{"cannot set the mode of " + path + ": " + std::strerror(errno)};
  return {};
}

}  // namespace

result<candidate_scratch> candidate_scratch::create(const std::string& root) {
  auto dir = scratch_dir::create(root, "kforge-run-");
  if (!dir) return error{dir.err().message};
  candidate_scratch s;
  s.dir_ = *dir;
  s.lib_ = (*dir)->file("lib");
  s.work_ = (*dir)->file("work");
  s.root_ = (*dir)->file(".root");
  // The confined user must reach work/ and lib/ through the top folder, and own work/.
  for (const auto& [path, mode] : {std::pair{(*dir)->path(), 0711}, {s.lib_, 0755}, {s.work_, 0700}, {s.root_, 0700}})
    if (auto st = make_dir(path, static_cast<mode_t>(mode)); !st) return error{st.err().message};
  if (::geteuid() == 0 && ::chown(s.work_.c_str(), confined_uid(), confined_gid()) != 0)
    return error{"cannot give " + s.work_ + " to the confined user: " + std::strerror(errno)};
  return s;
}

child_options candidate_scratch::options(const run_options& o) const {
  child_options c = sandbox_child_options(o, work_);
  confinement conf = candidate_confinement(o.confine).granted;
  if (!conf.any()) return c;
  conf.root = root_;
  conf.read_only = system_read_only_paths(o.program);
  conf.read_only.push_back(lib_);
  conf.writable = {work_};
  c.confine = std::move(conf);
  return c;
}

result<std::string> candidate_scratch::stage(const std::string& library, const std::string& name) const {
  auto bytes = read_text_file(library);
  if (!bytes) return error{bytes.err().message};
  const std::string target = lib_ + "/" + name;
  ::unlink(target.c_str());
  auto out = file_writer::open(target, file_writer::mode::create_new);
  if (!out) return error{out.err().message};
  if (auto st = out->append(*bytes); !st) return error{st.err().message};
  if (auto st = out->close(); !st) return error{st.err().message};
  return target;
}

}  // namespace kforge::sandbox

#include "sandbox/compiler.hpp"

#include <signal.h>

#include <filesystem>
#include <fstream>
#include <iomanip>
#include <optional>
#include <sstream>

#include "common/hash.hpp"
#include "sandbox/compile_cache.hpp"
#include "sandbox/library_check.hpp"
#include "common/subprocess.hpp"
#include "sandbox/scratch_dir.hpp"

namespace kforge::sandbox {

namespace fs = std::filesystem;

namespace {

constexpr std::size_t max_log = 64 * 1024;

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

std::string seconds_text(std::chrono::milliseconds ms) {
  std::ostringstream s;
  s << ms.count() / 1000.0 << " s";
  return s.str();
}

std::string mib(std::uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

bool contains(const std::string& s, std::string_view what) {
  return s.find(what) != std::string::npos;
}

// Why nvcc failed, when it did: the status and one line.
void classify_failure(const process_output& out, const compile_options& opt, compile_result& r) {
  const std::string& log = out.output;
  r.status = compile_status::compile_error;
  if (contains(log, "out of memory") || contains(log, "bad_alloc") ||
      contains(log, "Cannot allocate memory") || contains(log, "memory exhausted")) {
    r.reason =
        "the compiler ran out of memory (limit " + mib(opt.memory_limit_bytes) + " per process)";
    return;
  }
  if (out.signal == SIGXFSZ || contains(log, "File size limit exceeded") ||
      contains(log, "signal 25")) {
    r.reason =
        "the compiler's output passed the file size limit (" + mib(opt.file_size_limit_bytes) + ")";
    return;
  }
  const diagnostic* first_error = nullptr;
  bool link = false;
  for (const auto& d : r.diagnostics) {
    if (d.level != severity::error) continue;
    if (!first_error) first_error = &d;
    link |= d.code == "ld" || d.code == "nvlink";
  }
  if (link) r.status = compile_status::link_error;
  if (first_error) {
    r.reason = summarize(*first_error);
  } else if (out.signal != 0) {
    r.reason = "nvcc was killed by signal " + std::to_string(out.signal);
  } else {
    r.reason = "nvcc failed (exit " + std::to_string(out.exit_code) + "): " + last_line(log);
  }
}

compile_status from_static(static_status s) {
  switch (s) {
    case static_status::ok:
      return compile_status::ok;
    case static_status::rejected:
      return compile_status::rejected;
    case static_status::link_error:
      return compile_status::link_error;
    case static_status::compile_error:
      return compile_status::compile_error;
    case static_status::infra_error:
      return compile_status::infra_error;
  }
  return compile_status::infra_error;
}

// Runs the library check on r.library and folds its verdict into r: status, reason, one
// diagnostic a finding. A library that fails it is no longer r's to hand out.
void check_built_library(compile_result& r, const library_permissions& perms) {
  const static_verdict lv = check_library(r.library, perms);
  r.status = from_static(lv.status);
  r.reason = lv.reason;
  for (const auto& f : lv.findings)
    r.diagnostics.push_back({0, 0, severity::error, std::string(rule_name(f.why)), f.what});
  if (!r.ok()) r.library.clear();
}

compile_result infra(std::string reason, std::chrono::steady_clock::time_point t0) {
  compile_result r;
  r.status = compile_status::infra_error;
  r.reason = std::move(reason);
  r.elapsed_ms = ms_since(t0);
  return r;
}

}  // namespace

std::string_view status_name(compile_status s) noexcept {
  switch (s) {
    case compile_status::ok:
      return "ok";
    case compile_status::compile_error:
      return "compile_error";
    case compile_status::link_error:
      return "link_error";
    case compile_status::rejected:
      return "rejected";
    case compile_status::timeout:
      return "timeout";
    case compile_status::infra_error:
      return "infra_error";
  }
  return "infra_error";
}

std::vector<std::string> candidate_command(const toolchain& tc, const std::string& source,
                                           const std::string& output, const compile_options& opt) {
  auto cmd = compile_command(tc, source, output, opt.arch);
  for (const char* a : {"-Xptxas", "-v", "-Xlinker", "--no-undefined"}) cmd.emplace_back(a);
  if (opt.libraries.cublas)
    for (const char* a : {"-lcublas", "-lcublasLt"}) cmd.emplace_back(a);
  return cmd;
}

std::string compile_key(const toolchain& tc, std::string_view source, const compile_options& opt) {
  // Bump the version when what a result holds changes: the library check's rules, the parsers.
  std::string material = "kforge-compile-v2";
  auto field = [&](std::string_view s) {
    material += '\0';
    material += std::to_string(s.size());
    material += ':';
    material.append(s);
  };
  field(tc.release);
  // The release names no patch level: the nvcc binary's size and time stand for the exact build.
  std::error_code ec;
  const auto size = fs::file_size(tc.nvcc, ec);
  const auto time = fs::last_write_time(tc.nvcc, ec).time_since_epoch().count();
  field(std::to_string(ec ? 0 : size) + "/" + std::to_string(ec ? 0 : time));
  field(opt.arch);
  // The permissions decide the library check's verdict, not only the flags.
  field(opt.libraries.cublas ? "cublas" : "-");
  field(opt.libraries.cudnn ? "cudnn" : "-");
  if (!opt.check_library) field("library unchecked");  // never shares an entry with checked builds
  // The flags without the paths that differ between hosts and runs (nvcc, -I, source, output).
  const auto cmd = candidate_command(tc, "<source>", "<output>", opt);
  for (std::size_t i = 1; i < cmd.size(); ++i)
    if (cmd[i].rfind("-I", 0) != 0) field(cmd[i]);
  std::ifstream abi(tc.abi_include + "/kforge/kernel_abi.h", std::ios::binary);
  std::stringstream abi_text;
  abi_text << abi.rdbuf();
  field(abi_text.str());
  field(source);
  std::ostringstream key;
  key << std::hex << std::setfill('0') << std::setw(16) << fnv1a64(material) << std::setw(16)
      << fnv1a64(material.data(), material.size(), 0x9e3779b97f4a7c15ull);
  return key.str();
}

compile_result compile(const toolchain& tc, std::string_view source, const compile_options& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string key = compile_key(tc, source, opt);
  std::optional<compile_cache> cache;
  if (!opt.cache_dir.empty()) {
    std::error_code ec;
    fs::create_directories(opt.cache_dir, ec);
    if (ec)
      return infra("cannot create the compile cache " + opt.cache_dir + ": " + ec.message(), t0);
    cache.emplace(opt.cache_dir);
    if (auto hit = cache->find(key, source)) {
      // The stored source matched byte for byte; the stored library is checked again, as if just
      // built: anyone who can write the cache directory could have swapped it.
      if (hit->ok() && opt.check_library) check_built_library(*hit, opt.libraries);
      hit->elapsed_ms = ms_since(t0);
      return std::move(*hit);
    }
  }

  // With a cache, build in a staging directory inside it, so publishing is one rename.
  auto dir = cache ? scratch_dir::create(opt.cache_dir, ".staging-")
                   : scratch_dir::create(opt.scratch_root, "kforge-build-");
  if (!dir) return infra(dir.message(), t0);
  const std::string src = (*dir)->file("candidate.cu");
  const std::string lib = (*dir)->file("kernel.so");
  const std::string tmp = (*dir)->file("tmp");
  {
    std::ofstream f(src, std::ios::binary);
    f.write(source.data(), static_cast<std::streamsize>(source.size()));
    if (!f) return infra("cannot write " + src, t0);
  }
  std::error_code ec;
  fs::create_directory(tmp, ec);

  process_limits lim;
  lim.time = opt.time_limit;
  lim.address_space_bytes = opt.memory_limit_bytes;
  lim.file_size_bytes = opt.file_size_limit_bytes;
  lim.working_dir = (*dir)->path();
  lim.env = {{"TMPDIR", tmp}};
  lim.max_output = opt.max_output;
  auto run = run_limited(candidate_command(tc, src, lib, opt), lim);
  if (!run) return infra("cannot run nvcc: " + run.message(), t0);
  if (run->exit_code == 127 && contains(run->output, "cannot run"))
    return infra("cannot run " + tc.nvcc + ": " + last_line(run->output), t0);

  compile_result r;
  r.cache_key = key;
  r.nvcc_ms = run->seconds * 1000.0;
  r.log = run->output.substr(0, max_log);
  r.diagnostics = parse_diagnostics(run->output, src);
  r.resources = parse_ptxas_usage(run->output);
  if (run->timed_out) {
    r.status = compile_status::timeout;
    r.reason = "the compile ran past its time limit of " + seconds_text(opt.time_limit);
  } else if (run->exit_code != 0 || run->signal != 0) {
    classify_failure(*run, opt, r);
  } else if (!fs::exists(lib, ec)) {
    r.status = compile_status::compile_error;
    r.reason = "nvcc succeeded but wrote no library";
  } else {
    r.library = lib;
    if (opt.check_library)
      check_built_library(r, opt.libraries);
    else
      r.status = compile_status::ok;
  }
  fs::remove_all(tmp, ec);
  if (!r.ok()) fs::remove(lib, ec);

  if (cache && compile_cache::cacheable(r)) {
    if (auto moved = cache->publish(key, source, (*dir)->path(), r)) {
      if (*moved) (*dir)->release();
      if (r.ok()) r.library = cache->entry_path(key) + "/kernel.so";
      r.elapsed_ms = ms_since(t0);
      return r;
    }
    // Not stored (a disk problem): the result stands on its own, as without a cache.
  }
  if (r.ok()) r.scratch = std::shared_ptr<const void>(std::move(*dir));
  r.elapsed_ms = ms_since(t0);
  return r;
}

}  // namespace kforge::sandbox

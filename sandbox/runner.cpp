#include "sandbox/runner.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <chrono>
#include <cstdio>
#include <cerrno>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <optional>

#include <nlohmann/json.hpp>

#include "common/hash.hpp"
#include "common/log.hpp"
#include "common/parallel.hpp"
#include "common/visible_gpus.hpp"
#include "sandbox/child_protocol.hpp"
#include "sandbox/ncu_profiler.hpp"
#include "tasks/task_parser.hpp"

namespace kforge::sandbox {

namespace {

using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;
using ms = std::chrono::milliseconds;

std::string default_scratch_root(const std::string& given) {
  if (!given.empty()) return given;
  // Output files go through here: tmpfs keeps them off the disk.
  if (::access("/dev/shm", W_OK) == 0) return "/dev/shm";
  return {};
}

// An error measure of the reference server's compare reply. JSON has no Inf or NaN, so a
// non-finite error (an output holding Inf) arrives as null: the output is infinitely wrong.
double error_measure(const json& reply, const char* key) {
  const auto it = reply.find(key);
  return it != reply.end() && it->is_number() ? it->get<double>()
                                              : std::numeric_limits<double>::infinity();
}

double elapsed_ms(clock_type::time_point since) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - since).count();
}

wire::VerdictStatus status_named(const std::string& s) {
  for (int i = 0; i <= static_cast<int>(wire::VerdictStatus::MAX); ++i) {
    const auto v = static_cast<wire::VerdictStatus>(i);
    if (s == wire::EnumNameVerdictStatus(v)) return v;
  }
  return wire::VerdictStatus::infra_error;
}

/// Why the candidate's process gave no reply, as the verdict's reason.
std::string describe_failure(const child_reply& r, ms limit) {
  switch (r.failure) {
    case child_failure::timeout:
      return "ran past the sandbox's " + std::to_string(limit.count()) + " ms limit (killed)";
    case child_failure::died: return "the candidate's process ended (" + r.detail + ")";
    case child_failure::protocol: return "the candidate's process broke the protocol: " + r.detail;
    case child_failure::none: break;
  }
  return r.detail;
}

/// A child's reply that must be ok: the parsed object, or an error with the child's reason (or
/// the raw text when it is not JSON).
result<json> ok_reply(const std::string& text) {
  json reply = json::parse(text, nullptr, false);
  if (reply.is_discarded()) return error{"malformed reply: " + text};
  if (!reply.value("ok", false)) return error{reply.value("reason", text)};
  return reply;
}

// Whether a check's reply names exactly the files the child was to write for it.
bool own_output_files(const json& reply, const std::string& dir, int check, std::size_t outputs) {
  const auto it = reply.find("files");
  if (it == reply.end() || !it->is_array() || it->size() != outputs) return false;
  for (std::size_t i = 0; i < outputs; ++i)
    if (!(*it)[i].is_string() || (*it)[i].get<std::string>() != protocol::output_file(dir, check, static_cast<int>(i)))
      return false;
  return true;
}

/// Adds the time from its construction to its end to `into` (a run_phases field).
class phase_timer {
 public:
  explicit phase_timer(double& into) : into_(into), start_(clock_type::now()) {}
  ~phase_timer() { into_ += elapsed_ms(start_); }
  phase_timer(const phase_timer&) = delete;
  phase_timer& operator=(const phase_timer&) = delete;

 private:
  double& into_;
  clock_type::time_point start_;
};

ms left_until(clock_type::time_point deadline) {
  return std::max(ms(1), std::chrono::duration_cast<ms>(deadline - clock_type::now()));
}

/// One start-up request to a sandbox child (`role`) that must succeed: its ok reply, or why not.
result<json> start_request(const run_options& o, const char* role, child_process& child, const json& req) {
  const auto r = child.request(req.dump(), o.start_time_limit);
  if (r.failure != child_failure::none)
    return error{std::string(role) + " failed at " + req.at("op").get<std::string>() + ": " + r.detail +
                 " " + child.take_output()};
  auto ok = ok_reply(r.json);
  if (!ok) return error{std::string(role) + ": " + ok.err().message};
  return ok;
}

/// Starts `kforge ROLE` (a sandbox child) with `options` and sends it `hello`: the reply, or why
/// not.
result<json> start_child(const run_options& o, const char* role, const child_options& options,
                         child_process& child, const json& hello) {
  auto started = child_process::start({o.program, role}, options);
  if (!started) return error{std::string("cannot start ") + role + ": " + started.err().message};
  child = std::move(*started);
  auto reply = start_request(o, role, child, hello);
  child.take_output();
  return reply;
}

/// Prints "sandbox: LINE" once per process for each `flag`: what one child's probe reports of the
/// host, every child on it would report.
void say_once(std::once_flag& flag, const std::string& line) {
  std::call_once(flag, [&] { kforge::log::warn("sandbox: " + line); });
}

}  // namespace

std::vector<check_spec> plan_checks(const tasks::task& t, std::uint64_t seed, int max_variants) {
  auto seed_of = [&](std::uint64_t i) {
    const std::uint64_t parts[2] = {seed, i};
    return fnv1a64(parts, sizeof parts);
  };
  std::vector<check_spec> checks = {{seed_of(0), protocol::primary}, {seed_of(1), protocol::primary}};
  const int n = std::min<int>(max_variants, static_cast<int>(t.variants.size()));
  for (int v = 0; v < n; ++v) checks.push_back({seed_of(2 + v), v});
  if (checks.size() < 3) checks.push_back({seed_of(2), protocol::primary});
  return checks;
}

// ---- run_phases ----

const std::vector<std::pair<const char*, double run_phases::*>>& run_phases::fields() {
  static const std::vector<std::pair<const char*, double run_phases::*>> all = {
      {"gpu_wait_ms", &run_phases::gpu_wait_ms}, {"start_ms", &run_phases::start_ms},
      {"prepare_ms", &run_phases::prepare_ms},   {"load_ms", &run_phases::load_ms},
      {"check_ms", &run_phases::check_ms},       {"compare_ms", &run_phases::compare_ms},
      {"trials_ms", &run_phases::trials_ms},     {"baseline_ms", &run_phases::baseline_ms},
      {"unload_ms", &run_phases::unload_ms},     {"trial_staging_ms", &run_phases::trial_staging_ms},
      {"trial_delivery_ms", &run_phases::trial_delivery_ms}, {"confirm_ms", &run_phases::confirm_ms},
      {"profile_ms", &run_phases::profile_ms}};
  return all;
}

const std::vector<std::pair<const char*, int run_phases::*>>& run_phases::counts() {
  static const std::vector<std::pair<const char*, int run_phases::*>> all = {
      {"children_started", &run_phases::children_started},
      {"leak_recycles", &run_phases::leak_recycles},
      {"device_wide_leak_checks", &run_phases::device_wide_leak_checks},
      {"confirmations", &run_phases::confirmations},
      {"profiles", &run_phases::profiles},
      {"expected_releases", &run_phases::expected_releases}};
  return all;
}

run_phases& run_phases::operator+=(const run_phases& o) {
  candidates += o.candidates;
  for (const auto& [name, c] : counts()) this->*c += o.*c;
  for (const auto& [name, f] : fields()) this->*f += o.*f;
  return *this;
}

run_phases run_phases::operator-(const run_phases& o) const {
  run_phases d = *this;
  d.candidates -= o.candidates;
  for (const auto& [name, c] : counts()) d.*c -= o.*c;
  for (const auto& [name, f] : fields()) d.*f -= o.*f;
  return d;
}

// ---- gpu_slot ----

gpu_slot::gpu_slot(run_options options) : options_(std::move(options)) {
  // Started on first use: a slot used only for its facts starts one.
  for (int i = 0; i < std::max(1, options_.reference_servers); ++i) servers_.push_back(std::make_unique<server>());
}
gpu_slot::~gpu_slot() = default;

status gpu_slot::start_locked(server& s) {
  // The GPU's servers share one expected-output budget.
  const std::int64_t cache_bytes = protocol::expected_cache_bytes / static_cast<std::int64_t>(servers_.size());
  if (!s.scratch) {
    auto dir = scratch_dir::create(default_scratch_root(options_.scratch_root), "kforge-ref-");
    if (!dir) return error{dir.err().message};
    s.scratch = *dir;
  }
  auto hello = start_child(options_, "sandbox-ref", sandbox_child_options(options_, s.scratch->path()), s.child,
                           json{{"op", "hello"}, {"cache_bytes", cache_bytes}});
  if (!hello) return error{hello.err().message};
  s.facts_json = hello->at("gpu").dump();
  if (const auto f = gpu_facts_from_json(s.facts_json); f && options_.memory_share > 0)
    memory_.set_budget(static_cast<std::int64_t>(options_.memory_share * static_cast<double>(f->memory_bytes)));
  memory_budget_set_ = true;
  return {};
}

status gpu_slot::start_servers() {
  std::vector<std::string> errors(servers_.size());
  parallel_for(servers_.size(), static_cast<int>(servers_.size()), [&](std::size_t i) {
    server& s = *servers_[i];
    std::lock_guard lock(s.mutex);
    if (!s.child.running())
      if (auto st = start_locked(s); !st) errors[i] = st.err().message;
  });
  for (const auto& e : errors)
    if (!e.empty()) return error{"reference server: " + e};
  return {};
}

memory_gate& gpu_slot::memory() {
  if (!memory_budget_set_) (void)facts();
  return memory_;
}

result<gpu_facts> gpu_slot::facts() {
  server& s = *servers_.front();
  std::lock_guard lock(s.mutex);
  if (!s.child.running())
    if (auto st = start_locked(s); !st) return error{st.err().message};
  return gpu_facts_from_json(s.facts_json);
}

result<nlohmann::json> gpu_slot::reference(const nlohmann::json& request, std::uint64_t route) {
  server& s = *servers_[route % servers_.size()];
  std::lock_guard lock(s.mutex);
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (!s.child.running())
      if (auto st = start_locked(s); !st) return error{st.err().message};
    const auto r = s.child.request(request.dump(), options_.reference_time_limit);
    if (r.failure == child_failure::none) return ok_reply(r.json);
    if (r.failure == child_failure::timeout)
      return error{"reference server: " + r.detail};  // a second try would take as long
  }
  return error{"reference server keeps dying: " + s.child.take_output()};
}

run_phases gpu_slot::phases() const {
  std::lock_guard lock(phases_mutex_);
  return phases_;
}

void gpu_slot::add_phases(const run_phases& p) {
  std::lock_guard lock(phases_mutex_);
  phases_ += p;
}

std::string gpu_slot::profiling_denied() const {
  std::lock_guard lock(phases_mutex_);
  return profiling_denied_;
}

void gpu_slot::deny_profiling(const std::string& why) {
  std::lock_guard lock(phases_mutex_);
  profiling_denied_ = why;
}

gpu_slot::gpu_lock::gpu_lock(gpu_slot& s, bool exclusive) : slot_(s), exclusive_(exclusive) {
  std::lock_guard gate(s.gate_);
  if (exclusive)
    s.use_.lock();
  else
    s.use_.lock_shared();
  // Other kforge processes on this host use the same GPU (sandbox workers, the sampler).
  host_.emplace(physical_gpu(s.options_.gpu), exclusive);
}

gpu_slot::gpu_lock::~gpu_lock() {
  host_.reset();
  if (exclusive_)
    slot_.use_.unlock();
  else
    slot_.use_.unlock_shared();
}

// ---- runner ----

runner::runner(std::shared_ptr<gpu_slot> slot) : slot_(std::move(slot)) {}
runner::~runner() = default;

result<bool> runner::ensure_child(double& gpu_wait_ms, bool fresh) {
  const auto& o = slot_->options();
  if (!fresh && child_.running() && served_ < o.recycle_after) return false;
  child_.kill();
  served_ = 0;
  if (!scratch_) {
    auto dir = candidate_scratch::create(default_scratch_root(o.scratch_root));
    if (!dir) return error{dir.err().message};
    scratch_ = std::move(*dir);
  }
  // A fresh copy every time: no earlier child can have touched the library the probe loads.
  auto probe_library = scratch_->stage(o.probe_library, "probe.so");
  if (!probe_library) return error{"probe library: " + probe_library.err().message};
  // Starting the process and its CUDA context needs no lock; the probe kernel runs on the GPU, so
  // it shares it with verification and never meets a timed trial.
  auto hello = start_child(o, "sandbox-child", scratch_->options(o), child_, json{{"op", "hello"}});
  if (!hello) {
    child_.kill();  // a child that failed its start is never given a candidate
    return error{hello.err().message};
  }
  std::optional<gpu_slot::gpu_lock> sharing;
  {
    phase_timer t(gpu_wait_ms);
    sharing.emplace(*slot_, false);
  }
  // `pid` is the child as this process sees it: NVML may report it so when the child lives in a
  // PID namespace of its own.
  auto probed = start_request(o, "sandbox-child", child_,
                              json{{"op", "probe"}, {"library", *probe_library}, {"pid", child_.pid()}, {"seccomp", o.confine}});
  child_.take_output();
  if (!probed) {
    child_.kill();
    return error{probed.err().message};
  }
  static std::once_flag seccomp_said, leak_check_said;
  if (const std::string seccomp = probed->value("seccomp", "on"); o.confine && seccomp != "on")
    say_once(seccomp_said, "candidate children run without a seccomp filter (" + seccomp + ")");
  if (probed->value("leak_check", "") != protocol::own_usage_leak_check)
    say_once(leak_check_said, "the leak check reads the GPU's free memory, not each child's own (" +
                                  probed->value("leak_check_note", "no reason given") + ")");
  return true;
}

status runner::start() {
  double waited = 0;
  auto started = ensure_child(waited);
  if (!started) return error{started.err().message};
  return {};
}

/// One candidate's way through the run stage: load, verify, time, confirm. Every step that ends
/// the candidate's run sets `out_` and returns false; finish() then unloads (or drops) the child.
class candidate_run {
 public:
  candidate_run(runner& r, const tasks::task& t, std::string library, std::uint64_t seed)
      : r_(r),
        o_(r.slot_->options()),
        library_(std::move(library)),
        task_json_(json::parse(tasks::to_json_line(t))),
        checks_(plan_checks(t, seed, o_.max_variants)),
        // Every request of this candidate goes to the reference server its task hashes to: the
        // server that holds (or will hold) the task's expected outputs for the rest of its group.
        route_(fnv1a64(t.id)),
        seed_(seed),
        primary_bytes_(tasks::primary_bytes(t)) {
    ph_.candidates = 1;
  }
  ~candidate_run() { r_.slot_->add_phases(ph_); }
  candidate_run(const candidate_run&) = delete;
  candidate_run& operator=(const candidate_run&) = delete;

  run_outcome run() {
    std::optional<memory_gate::claim> memory;
    {
      phase_timer t(ph_.gpu_wait_ms);
      memory.emplace(r_.slot_->memory(), static_cast<std::int64_t>(o_.memory_factor * static_cast<double>(primary_bytes_)));
    }
    try {
      (void)(start_child() && prepare() && load() && verify() && time() && confirm());
    } catch (const json::exception& e) {
      // A reply without a field it must have: only the candidate's process (whose memory its
      // code shares) sends such a thing; the reference server's replies come from our code alone.
      r_.child_.kill();
      child_failed_ = true;
      verdict(wire::VerdictStatus::hack_suspected,
              std::string("the candidate's process sent a malformed reply: ") + e.what());
    }
    try {
      profile();
    } catch (const json::exception& e) {
      // A reply under ncu without a field it must have: the verdict was made before, and a
      // profile never changes it.
      step_done();
      out_.profile.reset();
      out_.profile_skipped = std::string("the profiled child sent a malformed reply: ") + e.what();
    }
    // Still holding its memory claim: a large task's expected outputs leave the server's GPU memory
    // before the next candidate is admitted (best effort: a server that cannot answer has let go).
    if (primary_bytes_ >= protocol::large_set_bytes)
      if (const auto r = r_.slot_->reference({{"op", "release"}}, route_); r && r->value("released", false))
        ++ph_.expected_releases;
    return finish();
  }

 private:
  // ---- the GPU lock and the candidate's deadline ----

  // Every use of the GPU but timing (the probe, expected outputs, the candidate's library and
  // checks, comparing, unloading) shares it with other runners, never with a timed trial. The
  // lock is taken per step, not for the whole verification: a runner waiting to time then waits
  // for one step of each verifying runner, not for all of their remaining steps. `gpu_` holds the
  // lock of the step under way (exclusive while timing); a step inside another (unloading after a
  // failed check or trial) runs under the lock already held. Waiting for it is not the
  // candidate's time: its deadline moves by the wait.
  void share_gpu() {
    if (gpu_) return;
    const auto since = clock_type::now();
    gpu_.emplace(*r_.slot_, false);
    const auto waited = clock_type::now() - since;
    ph_.gpu_wait_ms += std::chrono::duration<double, std::milli>(waited).count();
    deadline_ += waited;
  }
  void own_gpu() {
    {
      phase_timer t(ph_.gpu_wait_ms);
      gpu_.emplace(*r_.slot_, true);
    }
    deadline_ = clock_type::now() + o_.time_limit;  // waiting for the GPU is not the candidate's time
  }
  void step_done() { gpu_.reset(); }

  // ---- outcomes ----

  bool infra(std::string why) {
    out_.status = wire::VerdictStatus::infra_error;
    out_.reason = std::move(why);
    return false;
  }
  bool verdict(wire::VerdictStatus status, std::string why) {
    out_.status = status;
    out_.reason = std::move(why);
    return false;
  }

  // One request to the candidate's child under its deadline; a reply that is not ok decides the
  // verdict. A violation of the channel's protocol (a second line, a forged reply) or a kill by
  // the seccomp filter is the candidate's doing.
  bool ask(const json& req, json& reply) {
    const auto r = r_.child_.request(req.dump(), left_until(deadline_));
    if (r.failure != child_failure::none) {
      child_failed_ = true;
      const bool forbidden_call = r.detail.find("signal " + std::to_string(SIGSYS)) != std::string::npos;
      if (r.failure == child_failure::protocol || forbidden_call)
        return verdict(wire::VerdictStatus::hack_suspected,
                       forbidden_call ? "the candidate made a system call the sandbox forbids (its process was "
                                        "killed by the seccomp filter: " + r.detail + ")"
                                      : describe_failure(r, o_.time_limit));
      return verdict(r.failure == child_failure::timeout ? wire::VerdictStatus::timeout
                                                         : wire::VerdictStatus::runtime_error,
                     describe_failure(r, o_.time_limit));
    }
    reply = json::parse(r.json, nullptr, false);
    if (reply.is_discarded()) {
      r_.child_.kill();
      child_failed_ = true;
      return verdict(wire::VerdictStatus::hack_suspected, "the candidate's process sent a malformed reply");
    }
    if (!reply.value("ok", false)) {
      out_.status = status_named(reply.value("status", "infra_error"));
      out_.reason = reply.value("reason", "no reason given");
      if (reply.value("fatal", false)) r_.child_.kill();  // it exits on its own; make sure
      return false;
    }
    return true;
  }

  // Unloads the candidate (the leak check), or drops a child it may have tampered with: the child
  // is reused only after a candidate whose every reply was in order and that ended ok or
  // wrong_answer.
  run_outcome finish() {
    out_.output = r_.child_.take_output();
    const bool vouched = out_.status == wire::VerdictStatus::ok ||
                         out_.status == wire::VerdictStatus::wrong_answer ||
                         out_.status == wire::VerdictStatus::infra_error;
    if (!vouched) r_.child_.kill();
    if (!child_failed_ && r_.child_.running()) {
      share_gpu();
      phase_timer t(ph_.unload_ms);
      const auto r = r_.child_.request(json{{"op", "unload"}}.dump(), ms(30'000));
      const json reply = json::parse(r.json, nullptr, false);
      if (r.failure != child_failure::none || reply.is_discarded()) {
        r_.child_.kill();
      } else {
        const std::string check = reply.value("leak_check", "");
        if (!check.empty() && check != protocol::own_usage_leak_check) ++ph_.device_wide_leak_checks;
        if (reply.value("recycle", false)) {
          if (!check.empty()) ++ph_.leak_recycles;  // else a CUDA error at unload
          r_.child_.kill();
        }
      }
    }
    step_done();
    ++r_.served_;
    return out_;
  }

  // ---- the steps ----

  bool start_child(bool fresh = false) {
    const auto since = clock_type::now();
    double waited = 0;
    auto started = r_.ensure_child(waited, fresh);
    ph_.gpu_wait_ms += waited;
    ph_.start_ms += elapsed_ms(since) - waited;
    if (!started) return infra(started.err().message);
    ph_.children_started += *started ? 1 : 0;
    return true;
  }

  // The trusted side first: expected outputs (and their shapes) for every input set.
  bool prepare() {
    json plan = json::array();
    for (const auto& c : checks_) plan.push_back({{"seed", c.seed}, {"variant", c.variant}});
    result<json> prepared = error{"not prepared"};
    share_gpu();
    {
      phase_timer t(ph_.prepare_ms);
      prepared = r_.slot_->reference({{"op", "prepare"}, {"task", task_json_}, {"checks", plan}}, route_);
    }
    step_done();
    if (!prepared) return infra(prepared.err().message);
    shapes_ = prepared->at("output_shapes");
    return true;
  }

  // The candidate's side, under its own deadline: a copy of its library the child cannot change.
  bool load() {
    deadline_ = clock_type::now() + o_.time_limit;
    const std::string name = std::filesystem::path(library_).filename().string();
    auto staged = r_.scratch_->stage(library_, std::to_string(++r_.staged_) + "-" + name);
    if (!staged) return infra(staged.err().message);
    json reply;
    share_gpu();  // loading runs the library's constructors, which may use the GPU
    phase_timer t(ph_.load_ms);
    const bool loaded = ask({{"op", "load"}, {"library", *staged}, {"task", task_json_}}, reply);
    ::unlink(staged->c_str());  // dlopen holds it open; the next candidate's copy gets a new name
    if (!loaded) return false;
    step_done();
    return true;
  }

  // The reference server's comparison of the outputs a child reply hands over (IPC handles, or
  // files in the scratch directory, which the server reads and this runner then deletes).
  // `files_instead` is set where the server cannot open IPC handles: ask again for files.
  result<json> compare(const json& reply, const json& spec, int index, const json& earlier, bool& files_instead) {
    files_instead = false;
    json request = {{"op", "compare"}, {"task", task_json_}, {"check", spec}, {"earlier", earlier}};
    const bool shared = reply.contains("ipc");
    if (shared) {
      request["ipc"] = reply.at("ipc");
    } else if (!own_output_files(reply, r_.scratch_->work(), index, shapes_.at(0).size())) {
      // The server would read, and this runner delete, whatever the reply names. (Every input set
      // has the task's number of outputs: the first set's shapes count them.)
      verdict(wire::VerdictStatus::hack_suspected, "the candidate's process named files other than its outputs");
      return error{out_.reason};
    } else {
      request["files"] = reply.at("files");
    }
    result<json> cmp = error{"not compared"};
    {
      phase_timer t(ph_.compare_ms);
      cmp = r_.slot_->reference(request, route_);
    }
    if (!shared)
      for (const auto& f : reply.at("files")) ::unlink(f.get<std::string>().c_str());
    if (!cmp && shared && cmp.err().message.rfind(protocol::ipc_unavailable, 0) == 0) {
      files_instead = true;
      ipc_ = false;
    } else if (!cmp) {
      infra(cmp.err().message);
    }
    return cmp;
  }

  // A compare reply's verdict on input set `what` ("input set 2 (primary shapes)"): true when the
  // outputs are close.
  bool judge_compare(const json& c, const std::string& what, bool after_timing) {
    if (c.contains("bad_share"))
      return verdict(wire::VerdictStatus::hack_suspected, what + ": " + c.at("bad_share").get<std::string>());
    out_.max_abs_error = std::max(out_.max_abs_error, error_measure(c, "max_abs"));
    out_.max_rel_error = std::max(out_.max_rel_error, error_measure(c, "max_rel"));
    if (c.value("close", false)) return true;
    out_.first_bad_index = c.value("first_bad", std::int64_t{-1});
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "%s: output %d differs from the reference: max abs error %.3g, max rel error %.3g, "
                  "first bad index %lld, %lld bad elements",
                  what.c_str(), c.value("bad_tensor", 0), error_measure(c, "max_abs"),
                  error_measure(c, "max_rel"), static_cast<long long>(out_.first_bad_index),
                  static_cast<long long>(c.value("bad_count", 0)));
    if (after_timing)  // it passed every input set before: it computes otherwise when timed
      return verdict(wire::VerdictStatus::hack_suspected,
                     std::string("the last timed trial's outputs are wrong though verification passed (") +
                         buf + ")");
    if (c.value("stale", false))
      return verdict(wire::VerdictStatus::hack_suspected,
                     what + ": the output equals an earlier input set's expected output (results cached "
                            "across calls)");
    return verdict(wire::VerdictStatus::wrong_answer, buf);
  }

  /// A check that failed outright (a runtime error, a timeout): its reason says on which input set,
  /// as a wrong answer's does.
  bool failed_on(const std::string& what) {
    if (out_.status == wire::VerdictStatus::runtime_error || out_.status == wire::VerdictStatus::timeout)
      out_.reason = what + ": " + out_.reason;
    return false;
  }

  bool verify() {
    const auto verify_start = clock_type::now();
    json earlier = json::array();
    for (std::size_t k = 0; k < checks_.size(); ++k) {
      const json spec = {{"seed", checks_[k].seed}, {"variant", checks_[k].variant}};
      const std::string what = "input set " + std::to_string(k + 1) + " (" +
                               (checks_[k].variant < 0 ? "primary shapes" : "a variant's shapes") + ")";
      // Outputs come as CUDA IPC handles (read on the GPU, nothing copied through the host), or as
      // files where IPC failed in the child; where the server cannot open the handles, the same
      // check once more as files.
      result<json> cmp = error{"not compared"};
      share_gpu();
      for (bool files_instead = true; files_instead;) {
        json reply;
        {
          phase_timer t(ph_.check_ms);
          if (!ask({{"op", "check"},
                    {"check", k},
                    {"seed", checks_[k].seed},
                    {"variant", checks_[k].variant},
                    {"output_shapes", shapes_.at(k)},
                    {"dir", r_.scratch_->work()},
                    {"ipc", ipc_}},
                   reply))
            return failed_on(what);
        }
        cmp = compare(reply, spec, static_cast<int>(k), earlier, files_instead);
        if (!cmp && !files_instead) return false;
      }
      step_done();
      if (!judge_compare(*cmp, what, false)) return false;
      ++out_.checks;
      earlier.push_back(spec);
    }
    out_.verify_ms = elapsed_ms(verify_start);
    return true;
  }

  // The time request for `seeds` (rotated over, or one per call with `fresh`); the child hands
  // over the last trial's outputs like a check's.
  json time_request(const json& seeds, int warmup, int trials, bool fresh) const {
    return {{"op", "time"},    {"seeds", seeds},           {"fresh", fresh},
            {"warmup", warmup}, {"trials", trials},         {"output_shapes", shapes_.at(0)},
            {"check", protocol::timed_check}, {"dir", r_.scratch_->work()}, {"ipc", ipc_}};
  }

  // Compares the outputs of the last timed trial, handed over in `reply`, with the reference for
  // the seed the reply names.
  bool verify_timed(const json& reply) {
    const json spec = {{"seed", reply.at("last_seed").get<std::uint64_t>()}, {"variant", protocol::primary}};
    share_gpu();
    bool files_instead = false;
    auto cmp = compare(reply, spec, protocol::timed_check, json::array(), files_instead);
    step_done();
    if (files_instead) return infra("the reference server could not read the timed outputs over CUDA IPC");
    return cmp && judge_compare(*cmp, "timing", true);
  }

  // Baseline and candidate trials alternate in rounds on an otherwise idle GPU. The baseline goes
  // first, so that a candidate slower than slow_cutoff x its median is known in its first trials
  // (run_options::slow_cutoff).
  bool time() {
    const auto time_start = clock_type::now();
    const json rotation = {checks_[0].seed, checks_[1].seed};
    std::vector<double> event_ms, wall_ms, base_ms;
    json reply;
    bool cut = false;
    own_gpu();
    for (int round = 0; round < o_.rounds && !cut; ++round) {
      const int warmup = round == 0 ? o_.warmup : 0;
      result<json> base = error{"not timed"};
      {
        phase_timer t(ph_.baseline_ms);
        base = r_.slot_->reference({{"op", "time"},
                                    {"task", task_json_},
                                    {"seed", checks_[0].seed},
                                    {"warmup", warmup},
                                    {"trials", o_.trials_per_round}},
                                   route_);
      }
      if (!base) return infra("baseline timing failed: " + base.err().message);
      for (const auto& v : base->at("event_ms")) base_ms.push_back(v.get<double>());
      json req = time_request(rotation, warmup, o_.trials_per_round, false);
      const std::uint64_t parts[3] = {seed_, 0x66696e616cULL, static_cast<std::uint64_t>(round)};
      req["final_seed"] = fnv1a64(parts, sizeof parts) | 1;  // never 0: 0 means none
      if (round == 0 && o_.slow_cutoff > 0) req["slow_ms"] = o_.slow_cutoff * summarize_trials(base_ms).median_ms;
      {
        phase_timer t(ph_.trials_ms);
        if (!ask(req, reply)) return false;
      }
      ph_.trial_staging_ms += reply.value("staging_ms", 0.0);
      ph_.trial_delivery_ms += reply.value("delivery_ms", 0.0);
      for (const auto& v : reply.at("event_ms")) event_ms.push_back(v.get<double>());
      for (const auto& v : reply.at("wall_ms")) wall_ms.push_back(v.get<double>());
      cut = reply.at("event_ms").size() < static_cast<std::size_t>(o_.trials_per_round);
    }
    step_done();
    out_.time_ms = elapsed_ms(time_start);
    out_.candidate = summarize_trials(event_ms);
    out_.baseline = summarize_trials(base_ms);
    if (auto hidden = hidden_work(event_ms, wall_ms); !hidden.empty())
      return verdict(wire::VerdictStatus::hack_suspected, hidden);
    if (!verify_timed(reply)) return false;
    out_.status = wire::VerdictStatus::ok;
    if (speedup() > o_.audit_speedup) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "speedup %.1fx over the eager baseline (audit above %.0fx)", speedup(),
                    o_.audit_speedup);
      out_.audit = buf;
    }
    if (cut) {
      char buf[200];
      std::snprintf(buf, sizeof buf,
                    "timed in %d trials, not %d: each took over %g x the eager baseline's median "
                    "(sandbox.slow_cutoff)",
                    out_.candidate.trials, o_.rounds * o_.trials_per_round, o_.slow_cutoff);
      out_.reason = buf;
    }
    return true;
  }

  double speedup() const {
    return out_.candidate.median_ms > 0 ? out_.baseline.median_ms / out_.candidate.median_ms : 0;
  }

  // A speedup above confirm_speedup is timed again in a fresh child, every trial on inputs drawn
  // from a seed of its own, and kept only if the re-timing confirms it.
  bool confirm() {
    const double first = speedup();
    if (o_.confirm_speedup <= 0 || first <= o_.confirm_speedup) return true;
    const auto since = clock_type::now();
    r_.child_.kill();
    if (!start_child(true) || !load()) return false;
    json reply;
    json seeds = json::array();
    for (int i = 0; i <= o_.confirm_trials; ++i) {  // one warm-up call, then the trials
      const std::uint64_t parts[3] = {seed_, 0x636f6e6669726dULL, static_cast<std::uint64_t>(i)};
      seeds.push_back(fnv1a64(parts, sizeof parts));
    }
    own_gpu();
    bool asked = false;
    {
      phase_timer t(ph_.confirm_ms);
      ++ph_.confirmations;
      asked = ask(time_request(seeds, 1, o_.confirm_trials, true), reply);
    }
    step_done();
    if (!asked) return false;
    std::vector<double> event_ms, wall_ms;
    for (const auto& v : reply.at("event_ms")) event_ms.push_back(v.get<double>());
    for (const auto& v : reply.at("wall_ms")) wall_ms.push_back(v.get<double>());
    if (auto hidden = hidden_work(event_ms, wall_ms); !hidden.empty())
      return verdict(wire::VerdictStatus::hack_suspected, "re-timing: " + hidden);
    if (!verify_timed(reply)) return false;
    out_.time_ms += elapsed_ms(since);
    const trial_stats again = summarize_trials(event_ms);
    char buf[240];
    if (again.median_ms <= o_.confirm_tolerance * out_.candidate.median_ms) {
      if (again.median_ms > out_.candidate.median_ms) out_.candidate = again;
      std::snprintf(buf, sizeof buf, "speedup %.1fx confirmed by re-timing on fresh inputs in a fresh child (%.1fx)",
                    first, out_.baseline.median_ms / again.median_ms);
    } else {
      std::snprintf(buf, sizeof buf,
                    "speedup %.1fx over eager not confirmed: %.1fx on fresh inputs in a fresh child; timing "
                    "withheld (no speed reward)",
                    first, again.median_ms > 0 ? out_.baseline.median_ms / again.median_ms : 0.0);
      out_.candidate = trial_stats{};
    }
    out_.reason += (out_.reason.empty() ? "" : "; ") + std::string(buf);
    return true;
  }

  // ---- the profile ----

  // An ok candidate's Nsight Compute profile (ncu_profiler.hpp), where wanted. It never changes
  // the verdict: whatever goes wrong only says why there is none. ncu replays the kernel under its
  // counters, so it holds the GPU as timing does (another candidate's timed trials would be
  // stretched by it); its time is profile_ms, waiting for the GPU gpu_wait_ms.
  void profile() {
    if (!o_.profile || out_.status != wire::VerdictStatus::ok) return;
    if (o_.ncu.empty()) {
      out_.profile_skipped = o_.ncu_missing.empty() ? "ncu not found" : o_.ncu_missing;
      return;
    }
    if (auto denied = r_.slot_->profiling_denied(); !denied.empty()) {
      out_.profile_skipped = denied;
      return;
    }
    const std::string name = std::filesystem::path(library_).filename().string();
    auto staged = r_.scratch_->stage(library_, std::to_string(++r_.staged_) + "-" + name);
    auto probe = r_.scratch_->stage(o_.probe_library, "profile-probe.so");
    if (!staged || !probe) {
      out_.profile_skipped = "cannot stage the library to profile: " +
                             (staged ? probe.err().message : staged.err().message);
      return;
    }
    own_gpu();
    const auto since = clock_type::now();
    ++ph_.profiles;
    profile_outcome got = profile_in_child(*staged, *probe);
    step_done();
    ::unlink(staged->c_str());
    out_.profile_ms = elapsed_ms(since);
    ph_.profile_ms += out_.profile_ms;
    static std::once_flag denied_said;
    if (got.denied) {
      r_.slot_->deny_profiling(got.skipped);
      say_once(denied_said, "no Nsight Compute profiles: " + got.skipped);
    }
    out_.profile = std::move(got.profile);
    out_.profile_skipped = std::move(got.skipped);
  }

  // ncu started as a candidate child is (the same confinement, with ncu's folder readable and the
  // namespace's own loopback up for ncu's connection to the process it launches), running
  // `kforge sandbox-child`, which is told over the usual protocol to call the kernel once.
  profile_outcome profile_in_child(const std::string& library, const std::string& probe) {
    const auto limit = o_.profile_time_limit;
    const auto deadline = clock_type::now() + limit;
    child_options opts = r_.scratch_->options(o_);
    opts.max_output = std::size_t{4} << 20;  // ncu's CSV report: ~40 KB a kernel
    if (opts.confine) {
      opts.confine->read_only.push_back(ncu_install_dir(o_.ncu));
      opts.confine->loopback_up = true;
    }
    profile_outcome out;
    auto started = child_process::start(ncu_command(o_.ncu, {o_.program, "sandbox-child"}, o_.profile_max_launches), opts);
    if (!started) {
      out.skipped = "cannot start ncu: " + started.err().message;
      return out;
    }
    child_process child = std::move(*started);
    const json requests[] = {
        {{"op", "hello"}},
        {{"op", "probe"}, {"library", probe}, {"pid", child.pid()}, {"seccomp", o_.confine}, {"profiled", true}},
        {{"op", "load"}, {"library", library}, {"task", task_json_}},
        {{"op", "profile"}, {"seed", checks_[0].seed}, {"output_shapes", shapes_.at(0)}}};
    for (const auto& req : requests) {
      const auto r = child.request(req.dump(), left_until(deadline));
      const json reply = r.failure == child_failure::none ? json::parse(r.json, nullptr, false) : json();
      if (r.failure == child_failure::none && reply.is_object() && reply.value("ok", false)) continue;
      child.kill();
      const std::string output = child.take_output();
      out = read_ncu_output(output, r.failure == child_failure::timeout, limit);
      if (!out.denied && r.failure != child_failure::timeout) {
        const std::string why = r.failure != child_failure::none ? r.detail
                                : reply.is_object()              ? reply.value("reason", r.json)
                                                                 : "a malformed reply";
        // A report from a child that failed is not one call's; what ncu said stays in the reason
        // (an ncu that cannot run here fails the child's first request).
        const std::string said = out.profile ? std::string() : out.skipped;
        out.profile.reset();
        out.skipped = "the profiled child failed at " + req.at("op").get<std::string>() + ": " + why +
                      (said.empty() ? "" : " (" + said + ")");
      }
      return out;
    }
    const auto ended = child.finish(left_until(deadline));
    return read_ncu_output(child.take_output(), !ended, limit);
  }

  runner& r_;
  const run_options& o_;
  std::string library_;
  json task_json_;
  std::vector<check_spec> checks_;
  std::uint64_t route_;
  std::uint64_t seed_;
  std::int64_t primary_bytes_;
  json shapes_;
  bool ipc_ = o_.share_outputs;  ///< outputs over CUDA IPC until the server says it cannot
  run_outcome out_;
  run_phases ph_;
  std::optional<gpu_slot::gpu_lock> gpu_;
  clock_type::time_point deadline_{};
  bool child_failed_ = false;
};

run_outcome runner::run(const tasks::task& t, const std::string& library, std::uint64_t seed) {
  candidate_run c(*this, t, library, seed);
  return c.run();
}

}  // namespace kforge::sandbox

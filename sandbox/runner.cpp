#include "sandbox/runner.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cerrno>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <optional>

#include <nlohmann/json.hpp>

#include "common/hash.hpp"
#include "common/parallel.hpp"
#include "common/visible_gpus.hpp"
#include "sandbox/child_protocol.hpp"
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

/// Starts `kforge ROLE` (a sandbox child) in `scratch` (created with `prefix` on first use) and
/// sends it `hello`: the reply, or why not.
result<json> start_child(const run_options& o, const char* role, const char* prefix,
                         std::shared_ptr<scratch_dir>& scratch, child_process& child, const json& hello) {
  if (!scratch) {
    auto dir = scratch_dir::create(default_scratch_root(o.scratch_root), prefix);
    if (!dir) return error{dir.err().message};
    scratch = *dir;
  }
  auto started = child_process::start({o.program, role}, sandbox_child_options(o, scratch->path()));
  if (!started) return error{std::string("cannot start ") + role + ": " + started.err().message};
  child = std::move(*started);
  auto reply = start_request(o, role, child, hello);
  child.take_output();
  return reply;
}

}  // namespace

child_options sandbox_child_options(const run_options& o, const std::string& scratch) {
  child_options c;
  c.working_dir = scratch;
  c.scrub_env = true;
  // What the dynamic loader and the CUDA driver need to find their libraries; nothing else of ours.
  c.keep_env = {"PATH", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH"};
  c.env = {{"CUDA_VISIBLE_DEVICES", physical_gpu(o.gpu)},
           {"HOME", scratch},
           {"TMPDIR", scratch},
           {"OMP_NUM_THREADS", "1"}};
  c.file_size_bytes = std::uint64_t{16} << 30;  // output files of the largest tasks fit
  c.cpu_seconds = 3600;                          // a backstop; children are recycled long before
  c.processes = 8192;                            // fork is rejected statically; this is a backstop
  c.max_output = o.max_output;
  return c;
}

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
      {"unload_ms", &run_phases::unload_ms}};
  return all;
}

const std::vector<std::pair<const char*, int run_phases::*>>& run_phases::counts() {
  static const std::vector<std::pair<const char*, int run_phases::*>> all = {
      {"children_started", &run_phases::children_started},
      {"leak_recycles", &run_phases::leak_recycles},
      {"device_wide_leak_checks", &run_phases::device_wide_leak_checks}};
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
  auto hello = start_child(options_, "sandbox-ref", "kforge-ref-", s.scratch, s.child,
                           json{{"op", "hello"}, {"cache_bytes", cache_bytes}});
  if (!hello) return error{hello.err().message};
  s.facts_json = hello->at("gpu").dump();
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

result<bool> runner::ensure_child(double& gpu_wait_ms) {
  const auto& o = slot_->options();
  if (child_.running() && served_ < o.recycle_after) return false;
  child_.kill();
  served_ = 0;
  // Starting the process and its CUDA context needs no lock; the probe kernel runs on the GPU, so
  // it shares it with verification and never meets a timed trial.
  auto hello = start_child(o, "sandbox-child", "kforge-run-", scratch_, child_, json{{"op", "hello"}});
  if (!hello) {
    child_.kill();  // a child that failed its start is never given a candidate
    return error{hello.err().message};
  }
  std::optional<gpu_slot::gpu_lock> sharing;
  {
    phase_timer t(gpu_wait_ms);
    sharing.emplace(*slot_, false);
  }
  auto probed = start_request(o, "sandbox-child", child_, json{{"op", "probe"}, {"library", o.probe_library}});
  child_.take_output();
  if (!probed) {
    child_.kill();
    return error{probed.err().message};
  }
  if (probed->value("leak_check", "") != protocol::own_usage_leak_check) {
    // Said once per process: every child on this host would say the same.
    static std::once_flag said;
    std::call_once(said, [&] {
      std::fprintf(stderr, "sandbox: the leak check reads the GPU's free memory, not each child's own (%s)\n",
                   probed->value("leak_check_note", "no reason given").c_str());
    });
  }
  return true;
}

status runner::start() {
  double waited = 0;
  auto started = ensure_child(waited);
  if (!started) return error{started.err().message};
  return {};
}

run_outcome runner::run(const tasks::task& t, const std::string& library, std::uint64_t seed) {
  run_outcome out;
  const auto& o = slot_->options();
  auto infra = [&](std::string why) {
    out.status = wire::VerdictStatus::infra_error;
    out.reason = std::move(why);
    return out;
  };
  run_phases ph;
  ph.candidates = 1;
  struct add_on_return {
    gpu_slot& slot;
    const run_phases& ph;
    ~add_on_return() { slot.add_phases(ph); }
  } add_phases{*slot_, ph};
  // Every use of the GPU but timing (the probe, expected outputs, the candidate's library and
  // checks, comparing, unloading) shares it with other runners, never with a timed trial. The
  // lock is taken per step, not for the whole verification: a runner waiting to time then waits
  // for one step of each verifying runner, not for all of their remaining steps.
  // `gpu` holds the lock of the step under way (exclusive while timing); a step inside another
  // (unloading after a failed check or trial) runs under the lock already held. Waiting for it is
  // not the candidate's time: its deadline moves by the wait.
  std::optional<gpu_slot::gpu_lock> gpu;
  clock_type::time_point deadline{};
  auto share_gpu = [&] {
    if (gpu) return;
    const auto since = clock_type::now();
    gpu.emplace(*slot_, false);
    const auto waited = clock_type::now() - since;
    ph.gpu_wait_ms += std::chrono::duration<double, std::milli>(waited).count();
    deadline += waited;
  };
  auto step_done = [&] { gpu.reset(); };
  {
    const auto since = clock_type::now();
    double waited = 0;
    auto started = ensure_child(waited);
    ph.gpu_wait_ms += waited;
    ph.start_ms += elapsed_ms(since) - waited;
    if (!started) return infra(started.err().message);
    ph.children_started += *started ? 1 : 0;
  }
  const json task_json = json::parse(tasks::to_json_line(t));
  const auto checks = plan_checks(t, seed, o.max_variants);
  // Every request of this candidate goes to the reference server its task hashes to: the server
  // that holds (or will hold) the task's expected outputs for the rest of its group.
  const std::uint64_t route = fnv1a64(t.id);

  // The trusted side first: expected outputs (and their shapes) for every input set.
  json plan = json::array();
  for (const auto& c : checks) plan.push_back({{"seed", c.seed}, {"variant", c.variant}});
  result<json> prepared = error{"not prepared"};
  share_gpu();
  {
    phase_timer t(ph.prepare_ms);
    prepared = slot_->reference({{"op", "prepare"}, {"task", task_json}, {"checks", plan}}, route);
  }
  step_done();
  if (!prepared) return infra(prepared.err().message);
  const json& shapes = prepared->at("output_shapes");

  // The candidate's side, under its own deadline. A reply that is not ok decides the verdict.
  deadline = clock_type::now() + o.time_limit;
  bool child_failed = false;
  auto ask = [&](const json& req, json& reply) -> bool {
    const auto r = child_.request(req.dump(), left_until(deadline));
    if (r.failure != child_failure::none) {
      child_failed = true;
      out.status = r.failure == child_failure::timeout ? wire::VerdictStatus::timeout
                                                        : wire::VerdictStatus::runtime_error;
      out.reason = describe_failure(r, o.time_limit);
      return false;
    }
    reply = json::parse(r.json, nullptr, false);
    if (reply.is_discarded()) {
      child_.kill();
      child_failed = true;
      out.status = wire::VerdictStatus::runtime_error;
      out.reason = "the candidate's process sent a malformed reply";
      return false;
    }
    if (!reply.value("ok", false)) {
      out.status = status_named(reply.value("status", "infra_error"));
      out.reason = reply.value("reason", "no reason given");
      if (reply.value("fatal", false)) child_.kill();  // it exits on its own; make sure
      return false;
    }
    return true;
  };
  auto finish = [&]() {
    out.output = child_.take_output();
    if (!child_failed && child_.running()) {
      share_gpu();
      phase_timer t(ph.unload_ms);
      json reply;
      const auto r = child_.request(json{{"op", "unload"}}.dump(), ms(30'000));
      reply = json::parse(r.json, nullptr, false);
      if (r.failure != child_failure::none || reply.is_discarded()) {
        child_.kill();
      } else {
        const std::string check = reply.value("leak_check", "");
        if (!check.empty() && check != protocol::own_usage_leak_check) ++ph.device_wide_leak_checks;
        if (reply.value("recycle", false)) {
          if (!check.empty()) ++ph.leak_recycles;  // else a CUDA error at unload
          child_.kill();
        }
      }
    }
    step_done();
    ++served_;
    return out;
  };

  json reply;
  // The timers stop before finish(): its unload is counted as unload only.
  bool asked = false;
  share_gpu();  // loading runs the library's constructors, which may use the GPU
  {
    phase_timer t(ph.load_ms);
    asked = ask({{"op", "load"}, {"library", library}, {"task", task_json}}, reply);
  }
  if (!asked) return finish();
  step_done();
  const auto verify_start = clock_type::now();
  json earlier = json::array();
  for (std::size_t k = 0; k < checks.size(); ++k) {
    const json spec = {{"seed", checks[k].seed}, {"variant", checks[k].variant}};
    // Outputs come as CUDA IPC handles (read on the GPU, nothing copied through the host), or as
    // files where IPC failed in the child; where the server cannot open the handles, the same
    // check once more as files.
    result<json> cmp = error{"not compared"};
    share_gpu();
    for (bool ipc = o.share_outputs;; ipc = false) {
      {
        phase_timer t(ph.check_ms);
        asked = ask({{"op", "check"},
                     {"check", k},
                     {"seed", checks[k].seed},
                     {"variant", checks[k].variant},
                     {"output_shapes", shapes.at(k)},
                     {"dir", scratch_->path()},
                     {"ipc", ipc}},
                    reply);
      }
      if (!asked) return finish();
      json compare = {{"op", "compare"}, {"task", task_json}, {"check", spec}, {"earlier", earlier}};
      const bool shared = reply.contains("ipc");
      if (shared) {
        compare["ipc"] = reply.at("ipc");
      } else if (!own_output_files(reply, scratch_->path(), static_cast<int>(k), shapes.at(k).size())) {
        // The server would read, and this runner delete, whatever the reply names.
        out.status = wire::VerdictStatus::hack_suspected;
        out.reason = "input set " + std::to_string(k + 1) + ": the candidate's process named files other than "
                     "its outputs";
        return finish();
      } else {
        compare["files"] = reply.at("files");
      }
      {
        phase_timer t(ph.compare_ms);
        cmp = slot_->reference(compare, route);
      }
      if (!shared)
        for (const auto& f : reply.at("files")) ::unlink(f.get<std::string>().c_str());
      if (!cmp && shared && cmp.err().message.rfind(protocol::ipc_unavailable, 0) == 0) continue;
      break;
    }
    step_done();
    if (!cmp) {
      infra(cmp.err().message);
      return finish();
    }
    const json& c = *cmp;
    if (c.contains("bad_share")) {
      out.status = wire::VerdictStatus::hack_suspected;
      out.reason = "input set " + std::to_string(k + 1) + ": " + c.at("bad_share").get<std::string>();
      return finish();
    }
    out.max_abs_error = std::max(out.max_abs_error, error_measure(c, "max_abs"));
    out.max_rel_error = std::max(out.max_rel_error, error_measure(c, "max_rel"));
    if (!c.value("close", false)) {
      out.first_bad_index = c.value("first_bad", std::int64_t{-1});
      if (c.value("stale", false)) {
        out.status = wire::VerdictStatus::hack_suspected;
        out.reason = "input set " + std::to_string(k + 1) +
                     ": the output equals an earlier input set's expected output (results cached "
                     "across calls)";
      } else {
        char buf[256];
        std::snprintf(buf, sizeof buf,
                      "input set %zu (%s): output %d differs from the reference: max abs error "
                      "%.3g, max rel error %.3g, first bad index %lld, %lld bad elements",
                      k + 1, checks[k].variant < 0 ? "primary shapes" : "a variant's shapes",
                      c.value("bad_tensor", 0), error_measure(c, "max_abs"), error_measure(c, "max_rel"),
                      static_cast<long long>(out.first_bad_index),
                      static_cast<long long>(c.value("bad_count", 0)));
        out.status = wire::VerdictStatus::wrong_answer;
        out.reason = buf;
      }
      return finish();
    }
    ++out.checks;
    earlier.push_back(spec);
  }
  out.verify_ms = elapsed_ms(verify_start);

  // Timing: baseline and candidate trials alternate in rounds on an otherwise idle GPU. The
  // baseline goes first, so that a candidate slower than slow_cutoff x its median is known in its
  // first trials (run_options::slow_cutoff).
  const auto time_start = clock_type::now();
  std::vector<double> event_ms, wall_ms, base_ms;
  bool cut = false;
  {
    {
      phase_timer t(ph.gpu_wait_ms);
      gpu.emplace(*slot_, true);
    }
    // Waiting for the GPU is not the candidate's time: its budget starts again here.
    deadline = clock_type::now() + o.time_limit;
    for (int round = 0; round < o.rounds && !cut; ++round) {
      const int warmup = round == 0 ? o.warmup : 0;
      result<json> base = error{"not timed"};
      {
        phase_timer t(ph.baseline_ms);
        base = slot_->reference({{"op", "time"},
                                 {"task", task_json},
                                 {"seed", checks[0].seed},
                                 {"warmup", warmup},
                                 {"trials", o.trials_per_round}},
                                route);
      }
      if (!base) {
        infra("baseline timing failed: " + base.err().message);
        return finish();
      }
      for (const auto& v : base->at("event_ms")) base_ms.push_back(v.get<double>());
      json req = {{"op", "time"},
                  {"seed", checks[0].seed},
                  {"warmup", warmup},
                  {"trials", o.trials_per_round},
                  {"output_shapes", shapes.at(0)}};
      if (round == 0 && o.slow_cutoff > 0)
        req["slow_ms"] = o.slow_cutoff * summarize_trials(base_ms).median_ms;
      {
        phase_timer t(ph.trials_ms);
        asked = ask(req, reply);
      }
      if (!asked) return finish();
      for (const auto& v : reply.at("event_ms")) event_ms.push_back(v.get<double>());
      for (const auto& v : reply.at("wall_ms")) wall_ms.push_back(v.get<double>());
      cut = reply.at("event_ms").size() < static_cast<std::size_t>(o.trials_per_round);
    }
    step_done();
  }
  out.time_ms = elapsed_ms(time_start);
  out.candidate = summarize_trials(event_ms);
  out.baseline = summarize_trials(base_ms);
  if (auto hidden = hidden_work(event_ms, wall_ms); !hidden.empty()) {
    out.status = wire::VerdictStatus::hack_suspected;
    out.reason = hidden;
    return finish();
  }
  out.status = wire::VerdictStatus::ok;
  if (cut) {
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "timed in %d trials, not %d: each took over %g x the eager baseline's median "
                  "(sandbox.slow_cutoff)",
                  out.candidate.trials, o.rounds * o.trials_per_round, o.slow_cutoff);
    out.reason = buf;
  }
  const double speedup =
      out.candidate.median_ms > 0 ? out.baseline.median_ms / out.candidate.median_ms : 0;
  if (speedup > o.audit_speedup) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "speedup %.1fx over the eager baseline (audit above %.0fx)",
                  speedup, o.audit_speedup);
    out.audit = buf;
  }
  return finish();
}

}  // namespace kforge::sandbox

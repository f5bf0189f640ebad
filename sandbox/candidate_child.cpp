// `kforge sandbox-child`: the process candidate code runs in (protocol: child_protocol.hpp).
//
// What it guarantees the supervisor: inputs are regenerated here from the task's seeds (the same
// tensors the reference server draws), outputs are poisoned before every call (NaN, then a
// finite value) so unwritten elements show, inputs are compared with a private copy after the
// calls, the candidate runs on a non-blocking stream of ours so work it hides on the legacy or
// per-thread stream escapes the events but not the device-wide synchronize around each timed
// trial, and any CUDA error from synchronizing ends this process after the reply (the context may
// be unusable). It never sees an expected output: those live in the reference server.
#include <ATen/ATen.h>
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <optional>

#include <nlohmann/json.hpp>

#include "common/child_process.hpp"
#include "kforge/kernel_abi.h"
#include "sandbox/call_shapes.hpp"
#include "sandbox/child_protocol.hpp"
#include "sandbox/children.hpp"
#include "sandbox/gpu_facts.hpp"
#include "sandbox/gpu_timing.hpp"
#include "sandbox/process_memory.hpp"
#include "sandbox/seccomp_filter.hpp"
#include "model/torch_cache.hpp"
#include "tasks/aten_convert.hpp"
#include "tasks/inputs.hpp"
#include "tasks/task_parser.hpp"

namespace kforge::sandbox {

namespace {

using json = nlohmann::json;
using forward_fn = int (*)(const kf_tensor*, int32_t, kf_tensor*, int32_t, void*, cudaStream_t);
using workspace_fn = size_t (*)(const kf_tensor*, int32_t);

/// Workspace beyond this is refused (runtime_error) rather than exhausting the GPU.
constexpr std::size_t max_workspace = std::size_t{8} << 30;
/// A candidate that leaves more device memory taken than this gets the child recycled.
constexpr std::size_t leak_limit = std::size_t{1} << 30;
/// Where the process's own usage cannot be read (no NVML; the driver reports another PID
/// namespace), the GPU's free memory stands in: a figure other processes move too, so it recycles
/// healthy children when they grow and can miss a leak when they shrink.
constexpr const char* device_wide = "device_free";
/// Output buffers kept for CUDA IPC beyond this are freed at unload, not held for later candidates.
constexpr std::size_t kept_shared_limit = std::size_t{256} << 20;

using protocol::failure;

std::string cuda_text(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

kf_dtype to_kf(at::ScalarType t) {
  switch (t) {
    case at::kHalf: return KF_FLOAT16;
    case at::kBFloat16: return KF_BFLOAT16;
    case at::kInt: return KF_INT32;
    case at::kLong: return KF_INT64;
    case at::kBool: return KF_BOOL;
    default: return KF_FLOAT32;
  }
}

kf_tensor describe(const at::Tensor& t) {
  kf_tensor k{};
  k.data = t.data_ptr();
  k.dtype = to_kf(t.scalar_type());
  k.ndim = static_cast<int32_t>(t.dim());
  for (int64_t d = 0; d < t.dim() && d < KF_MAX_DIMS; ++d) {
    k.shape[d] = t.size(d);
    k.strides[d] = t.stride(d);
  }
  return k;
}

/// The two poison values: NaN first (never passes a comparison), then a finite value far from
/// any real output. Integers and bools get two different bit patterns.
void poison(at::Tensor& t, int which) {
  if (at::isFloatingType(t.scalar_type())) {
    const double finite = t.scalar_type() == at::kHalf ? 31337.0 : 1.2345e30;
    t.fill_(which == 0 ? std::numeric_limits<double>::quiet_NaN() : finite);
  } else if (t.scalar_type() == at::kBool) {
    t.fill_(which == 0);
  } else {
    t.fill_(which == 0 ? 1515870810 : -1234567);
  }
}

class candidate_child {
 public:
  int serve() {
    return protocol::serve("sandbox child", [this](const nlohmann::json& req) { return dispatch(req); });
  }

 private:
  json dispatch(const json& req) {
    // The shared output buffers stay between requests and candidates: the runner sends the next
    // request only after the reference server has read them, and the next check overwrites them.
    const std::string op = req.at("op").get<std::string>();
    if (op == "hello") return hello();
    if (op == "probe") return probe(req);
    if (op == "load") return load(req);
    if (op == "check") {
      // The check's tensors are free once it returns but still torch's: for a large set (its
      // inputs, their copy, two outputs, the comparison's temporaries) several times the set's
      // size. The reference server compares next on the same GPU and needs that memory. Kept, a
      // server computing KernelBench's RMSNorm (7 GiB input) ran out beside a process holding
      // 56.7 GiB, 8 times the set, with that candidate alone on an H100 (2026-12-08); LeakyReLU's
      // 6 GiB set beside 54.7 GiB, 9 times, the day before.
      try {
        json reply = check(req);
        // Not after a sticky CUDA error (a fatal reply): the context is broken, cudaFree would
        // only fail, and the child exits anyway.
        if (!reply.value("fatal", false)) release_after_large_check();
        return reply;
      } catch (...) {  // out of memory, most likely: what it had allocated is free now
        release_after_large_check();
        throw;
      }
    }
    if (op == "time") return time(req);
    if (op == "unload") return unload();
    if (op == "profile") return profile(req);
    return failure("infra_error", "sandbox child: unknown op '" + op + "'");
  }

  json hello() {
    if (const auto e = cudaSetDevice(0); e != cudaSuccess)
      return failure("infra_error", "no usable GPU: " + cuda_text(e), true);
    auto facts = query_gpu(0);
    if (!facts) return failure("infra_error", facts.err().message, true);
    if (const auto e = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking); e != cudaSuccess)
      return failure("infra_error", "cudaStreamCreate: " + cuda_text(e), true);
    if (const auto e = flusher_.init(static_cast<std::size_t>(facts->l2_bytes)); e != cudaSuccess)
      return failure("infra_error", "L2 flush buffer: " + cuda_text(e), true);
    return json{{"ok", true}, {"gpu", json::parse(to_json(*facts))}};
  }

  /// The meter of this process's own device memory, checked against an allocation of known size
  /// (a PID of another namespace, or entries laid out differently by the driver, would give another
  /// figure); empty, with why in `why_not`, where it cannot be had or trusted.
  std::optional<process_memory_meter> checked_meter(std::string& why_not) {
    // In a PID namespace of its own the child is PID 1 to itself; NVML may report it by the PID
    // the supervisor sees. The self-check below picks whichever follows the allocation.
    for (const unsigned pid : {static_cast<unsigned>(::getpid()), outer_pid_}) {
      if (pid == 0) continue;
      nvml_pid_ = pid;
      if (auto m = checked_meter_for(pid, why_not)) return m;
    }
    return std::nullopt;
  }

  std::optional<process_memory_meter> checked_meter_for(unsigned pid, std::string& why_not) {
    char bus_id[32] = {};
    if (cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, 0) != cudaSuccess) {
      why_not = "no PCI bus id";
      return std::nullopt;
    }
    auto m = process_memory_meter::open(bus_id);
    if (!m) {
      why_not = m.err().message;
      return std::nullopt;
    }
    constexpr std::uint64_t block = std::uint64_t{64} << 20;
    const auto before = m->used_by(pid);
    void* p = nullptr;
    if (!before || cudaMalloc(&p, block) != cudaSuccess) {
      why_not = before ? "cannot allocate the self-check block" : before.err().message;
      return std::nullopt;
    }
    const auto with_block = m->used_by(pid);
    cudaFree(p);
    if (!with_block || *with_block < *before + block || *with_block > *before + 2 * block) {
      why_not = "NVML's figure for this process did not follow a 64 MiB allocation";
      return std::nullopt;
    }
    return std::move(*m);
  }

  /// The device memory this process holds, with torch's cache returned first; an error where it
  /// cannot be read.
  result<std::uint64_t> held_bytes() {
    model::release_torch_cache();
    if (!meter_) return error{"no meter"};
    return meter_->used_by(nvml_pid_);
  }

  std::size_t free_bytes() {
    model::release_torch_cache();
    std::size_t free = 0, total = 0;
    cudaMemGetInfo(&free, &total);
    return free;
  }

  // The first GPU work of a fresh child (the runner holds the GPU for it): torch's allocator and
  // kernels, the known-good kernel, then the leak check's baselines.
  json probe(const json& req) {
    const std::string library = req.at("library").get<std::string>();
    outer_pid_ = req.value("pid", 0u);
    (void)at::zeros({1}, at::device(at::kCUDA));  // torch's first use now, not in a candidate's check
    cudaDeviceSynchronize();
    void* h = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) return failure("infra_error", std::string("probe: dlopen: ") + ::dlerror(), true);
    auto fwd = reinterpret_cast<forward_fn>(::dlsym(h, "kf_forward"));
    json reply = json{{"ok", true}};
    if (!fwd) {
      reply = failure("infra_error", "probe: no kf_forward", true);
    } else {
      const auto x = at::randn({1 << 20}, at::device(at::kCUDA));
      auto y = at::empty_like(x);
      const kf_tensor in = describe(x);
      kf_tensor out = describe(y);
      const int rc = fwd(&in, 1, &out, 1, nullptr, stream_);
      const auto e = cudaStreamSynchronize(stream_);
      if (rc != 0 || e != cudaSuccess)
        reply = failure("infra_error", "probe kernel failed: " + cuda_text(e), true);
      else if (!at::equal(y, at::relu(x)))
        reply = failure("infra_error", "probe kernel gave a wrong answer: the GPU is not trustworthy",
                     true);
    }
    ::dlclose(h);
    if (!reply.value("ok", false)) return reply;
    std::string why_device_wide;
    meter_ = checked_meter(why_device_wide);
    const auto held = held_bytes();
    if (!held) {
      if (why_device_wide.empty()) why_device_wide = held.err().message;
      meter_.reset();
    }
    held_at_start_ = held ? *held : 0;
    free_at_start_ = free_bytes();
    reply["leak_check"] = meter_ ? protocol::own_usage_leak_check : device_wide;
    if (!meter_) reply["leak_check_note"] = why_device_wide;
    // Everything this process needs has run once: from here on candidate code may run.
    if (req.value("seccomp", true)) {
      const auto filtered = install_candidate_filter(req.value("profiled", false) ? filter_mode::profiled
                                                                                    : filter_mode::candidate);
      reply["seccomp"] = filtered ? std::string("on") : "off: " + filtered.err().message;
    } else {
      reply["seccomp"] = "off: turned off (sandbox.confine = false)";
    }
    return reply;
  }

  json load(const json& req) {
    if (lib_) unload();
    auto t = tasks::parse_task(req.at("task").dump(), "supervisor");
    if (!t) return failure("infra_error", t.err().message);
    task_ = std::move(*t);
    lib_ = ::dlopen(req.at("library").get<std::string>().c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib_) return failure("link_error", std::string("dlopen: ") + ::dlerror());
    forward_ = reinterpret_cast<forward_fn>(::dlsym(lib_, "kf_forward"));
    workspace_ = reinterpret_cast<workspace_fn>(::dlsym(lib_, "kf_workspace_bytes"));
    if (!forward_) return failure("link_error", "the library does not export kf_forward");
    return json{{"ok", true}};
  }

  /// Everything one call needs: kf_tensor views and the workspace.
  struct call_frame {
    std::vector<kf_tensor> in, out;
    at::Tensor workspace;
  };

  std::optional<json> prepare_frame(const std::vector<at::Tensor>& inputs,
                                    std::vector<at::Tensor>& outputs, call_frame& f) {
    f.in.clear();
    f.out.clear();
    for (const auto& t : inputs) f.in.push_back(describe(t));
    for (const auto& t : outputs) f.out.push_back(describe(t));
    const std::size_t bytes =
        workspace_ ? workspace_(f.in.data(), static_cast<int32_t>(f.in.size())) : 0;
    if (bytes > max_workspace)
      return failure("runtime_error", "kf_workspace_bytes asked for " + std::to_string(bytes) +
                                       " bytes (the limit is 8 GiB)");
    if (bytes > 0 && (!f.workspace.defined() || static_cast<std::size_t>(f.workspace.numel()) < bytes))
      f.workspace = at::empty({static_cast<int64_t>(bytes)}, at::device(at::kCUDA).dtype(at::kByte));
    return std::nullopt;
  }

  /// One call on our stream, synchronized; a failure reply or nothing.
  std::optional<json> call(call_frame& f) {
    int rc = 0;
    try {
      rc = forward_(f.in.data(), static_cast<int32_t>(f.in.size()), f.out.data(),
                    static_cast<int32_t>(f.out.size()),
                    f.workspace.defined() ? f.workspace.data_ptr() : nullptr, stream_);
    } catch (...) {
      return failure("runtime_error", "kf_forward threw a C++ exception");
    }
    if (const auto e = cudaStreamSynchronize(stream_); e != cudaSuccess)
      return failure("runtime_error", "CUDA error in the candidate's kernel: " + cuda_text(e), true);
    if (const auto e = cudaDeviceSynchronize(); e != cudaSuccess)
      return failure("runtime_error", "CUDA error (outside the given stream): " + cuda_text(e), true);
    if (const auto e = cudaGetLastError(); e != cudaSuccess)
      return failure("runtime_error", "CUDA error at launch: " + cuda_text(e));
    if (rc != 0) return failure("runtime_error", "kf_forward returned " + std::to_string(rc));
    return std::nullopt;
  }

  /// A runtime failure of a check's call with the shapes the call had (call_shapes.hpp).
  json with_shapes(json bad, const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs) const {
    if (bad.value("status", "") != "runtime_error") return bad;
    std::vector<tasks::shape> in, out;
    for (const auto& t : inputs) in.push_back(t.sizes().vec());
    for (const auto& t : outputs) out.push_back(t.sizes().vec());
    bad["reason"] = bad.value("reason", "") + " (" + describe_call(*task_, in, out) + ")";
    return bad;
  }

  /// torch's cached blocks back to the driver after a check of a large set; best effort.
  void release_after_large_check() noexcept {
    if (check_bytes_ < protocol::large_set_bytes) return;
    try {
      model::release_torch_cache();
    } catch (...) {  // a CUDA error here is the candidate's, and its own reply already says so
    }
  }

  json check(const json& req) {
    check_bytes_ = 0;
    if (!lib_ || !task_) return failure("infra_error", "check before load");
    const auto seed = req.at("seed").get<std::uint64_t>();
    const int variant = req.at("variant").get<int>();
    const tasks::shape_choice which =
        variant == protocol::primary ? tasks::shape_choice{} : tasks::shape_choice{variant};
    auto drawn = tasks::make_inputs(*task_, seed, which, tasks::device::cuda(0));
    if (!drawn) return failure("infra_error", drawn.err().message);
    const std::vector<at::Tensor> inputs = drawn->tensors();
    for (const auto& t : inputs) check_bytes_ += t.numel() * t.element_size();
    std::vector<at::Tensor> pristine;
    for (const auto& t : inputs) pristine.push_back(t.clone());

    const auto shapes = req.at("output_shapes").get<std::vector<std::vector<int64_t>>>();
    if (shapes.size() != task_->outputs.size())
      return failure("infra_error", "output shape count does not match the task");
    std::vector<at::Tensor> first, second;
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      const auto opts = at::device(at::kCUDA).dtype(tasks::detail::to_at(task_->outputs[i].type));
      first.push_back(at::empty(shapes[i], opts));
      second.push_back(at::empty(shapes[i], opts));
      check_bytes_ += first.back().numel() * first.back().element_size();
    }
    cudaDeviceSynchronize();  // inputs drawn on torch's stream are ready before ours runs

    call_frame f;
    for (int pass = 0; pass < 2; ++pass) {
      auto& outs = pass == 0 ? first : second;
      for (auto& o : outs) poison(o, pass);
      cudaDeviceSynchronize();
      if (auto bad = prepare_frame(inputs, outs, f)) return *bad;
      if (auto bad = call(f)) return with_shapes(std::move(*bad), inputs, outs);
    }
    for (std::size_t i = 0; i < inputs.size(); ++i)
      if (!at::equal(inputs[i], pristine[i]))
        return failure("hack_suspected", "the candidate changed input " + std::to_string(i) + " ('" +
                                          task_->inputs[i].name + "'), which is read-only");
    const auto& tol = task_->tolerance;
    for (std::size_t i = 0; i < first.size(); ++i) {
      const bool agree = at::isFloatingType(first[i].scalar_type())
                             ? at::allclose(first[i], second[i], tol.rtol, tol.atol, true)
                             : at::equal(first[i], second[i]);
      if (!agree)
        return failure("hack_suspected",
                    "two calls on the same inputs disagree on output " + std::to_string(i) +
                        ": outputs not fully written, or the result depends on the call count");
    }
    return deliver(first, req);
  }

  // The reply handing `outs` to the reference server: CUDA IPC handles when the request asks for
  // them and IPC works here, else raw files in the request's dir named after its check number.
  json deliver(const std::vector<at::Tensor>& outs, const json& req) {
    if (req.value("ipc", false))
      if (auto shared = share(outs)) return *shared;
    json files = json::array();
    const std::string dir = req.at("dir").get<std::string>();
    const int k = req.at("check").get<int>();
    for (std::size_t i = 0; i < outs.size(); ++i) {
      const auto host = outs[i].contiguous().cpu();
      const std::string path = protocol::output_file(dir, k, static_cast<int>(i));
      std::ofstream os(path, std::ios::binary | std::ios::trunc);
      os.write(static_cast<const char*>(host.data_ptr()),
               static_cast<std::streamsize>(host.numel() * host.element_size()));
      if (!os) return failure("infra_error", "cannot write " + path);
      files.push_back(path);
    }
    return json{{"ok", true}, {"files", files}};
  }

  /// One call on the primary inputs of `seed`, between cudaProfilerStart and cudaProfilerStop: the
  /// only kernels Nsight Compute profiles when it runs this child with --profile-from-start off
  /// (sandbox/ncu_profiler.hpp). The outputs are not handed over: the candidate was judged already.
  json profile(const json& req) {
    if (!lib_ || !task_) return failure("infra_error", "profile before load");
    auto inputs = timing_inputs(req.at("seed").get<std::uint64_t>(), true);
    if (!inputs) return failure("infra_error", inputs.err().message);
    const auto shapes = req.at("output_shapes").get<std::vector<std::vector<int64_t>>>();
    if (shapes.size() != task_->outputs.size())
      return failure("infra_error", "output shape count does not match the task");
    std::vector<at::Tensor> outs;
    for (std::size_t i = 0; i < shapes.size(); ++i)
      outs.push_back(at::empty(shapes[i], at::device(at::kCUDA).dtype(tasks::detail::to_at(task_->outputs[i].type))));
    call_frame f;
    if (auto bad = prepare_frame(*inputs, outs, f)) return *bad;
    cudaDeviceSynchronize();  // inputs and workspace ready: nothing of ours runs inside the range
    cudaProfilerStart();
    auto bad = call(f);
    cudaProfilerStop();
    if (bad) return *bad;
    return json{{"ok", true}};
  }

  /// The inputs of `seed` at the primary shapes: drawn once and kept for the rotation, or (with
  /// `fresh`) drawn for this call alone.
  result<std::vector<at::Tensor>> timing_inputs(std::uint64_t seed, bool fresh) {
    if (!fresh)
      if (auto it = timed_sets_.find(seed); it != timed_sets_.end()) return it->second;
    auto drawn = tasks::make_inputs(*task_, seed, std::nullopt, tasks::device::cuda(0));
    if (!drawn) return error{drawn.err().message};
    auto tensors = drawn->tensors();
    if (!fresh && timed_sets_.size() < 2) timed_sets_.emplace(seed, tensors);
    return tensors;
  }

  /// Before a timed call: the inputs of `seed` copied into the one set of input buffers every call
  /// reads (a result cached by input pointer is then wrong for the other seed), the outputs
  /// poisoned (a kernel that keeps a valid-looking output does the work every time), all done
  /// before the L2 flush and the events.
  std::optional<json> stage_call(std::uint64_t seed, bool fresh) {
    auto inputs = timing_inputs(seed, fresh);
    if (!inputs) return failure("infra_error", inputs.err().message);
    if (inputs->size() != timed_inputs_.size()) return failure("infra_error", "input count changed");
    for (std::size_t i = 0; i < inputs->size(); ++i) timed_inputs_[i].copy_((*inputs)[i]);
    for (auto& o : timed_outputs_) poison(o, 0);
    if (const auto e = cudaDeviceSynchronize(); e != cudaSuccess)
      return failure("runtime_error", "CUDA error before a timed call: " + cuda_text(e), true);
    return std::nullopt;
  }

  /// The buffers every timed call reads and writes, made on the first time request of a candidate.
  std::optional<json> timing_buffers(const json& req, std::uint64_t first_seed) {
    if (!timed_inputs_.empty()) return std::nullopt;
    auto inputs = timing_inputs(first_seed, false);
    if (!inputs) return failure("infra_error", inputs.err().message);
    for (const auto& t : *inputs) timed_inputs_.push_back(at::empty_like(t));
    const auto shapes = req.at("output_shapes").get<std::vector<std::vector<int64_t>>>();
    for (std::size_t i = 0; i < shapes.size() && i < task_->outputs.size(); ++i)
      timed_outputs_.push_back(at::empty(
          shapes[i], at::device(at::kCUDA).dtype(tasks::detail::to_at(task_->outputs[i].type))));
    return std::nullopt;
  }

  json time(const json& req) {
    if (!lib_ || !task_) return failure("infra_error", "time before load");
    const auto seeds = req.at("seeds").get<std::vector<std::uint64_t>>();
    const bool fresh = req.value("fresh", false);
    const int warmup = req.value("warmup", 0);
    const int trials = req.at("trials").get<int>();
    if (seeds.empty() || (fresh && seeds.size() < static_cast<std::size_t>(warmup + trials)))
      return failure("infra_error", "time: too few seeds");
    if (auto bad = timing_buffers(req, seeds.front())) return *bad;
    if (auto bad = prepare_frame(timed_inputs_, timed_outputs_, timed_frame_)) return *bad;
    std::size_t call_index = 0;  // fresh: seeds[i] for call i of this request
    auto next_seed = [&] { return fresh ? seeds[call_index++] : seeds[timed_calls_++ % seeds.size()]; };
    std::uint64_t last_seed = seeds.front();
    // slow_ms > 0: a kernel slower than that is timed in protocol::slow_trials trials, not all
    // (runner.hpp, run_options::slow_cutoff); one warm-up call of that length warms it enough.
    const double slow_ms = req.value("slow_ms", 0.0);
    // How long staging the calls and handing over the outputs took: the runner reports them as
    // parts of its trials phase.
    double staging_ms = 0;
    auto staged = [&](std::uint64_t seed, bool fresh_set) {
      const auto s0 = std::chrono::steady_clock::now();
      auto bad = stage_call(last_seed = seed, fresh_set);
      staging_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s0).count();
      return bad;
    };
    for (int i = 0; i < warmup; ++i) {
      if (auto bad = staged(next_seed(), fresh)) return *bad;
      const auto w0 = std::chrono::steady_clock::now();
      if (auto bad = call(timed_frame_)) return *bad;
      const auto w1 = std::chrono::steady_clock::now();
      if (slow_ms > 0 && std::chrono::duration<double, std::milli>(w1 - w0).count() > slow_ms) break;
    }
    json event_ms = json::array(), wall_ms = json::array();
    event_pair ev;
    int slow = 0;  // trials so far whose event time exceeded slow_ms
    // The last trial reads a set no call has seen before: a result cached by input pointer or by
    // call is wrong there, and its outputs are checked.
    const std::uint64_t final_seed = req.value("final_seed", std::uint64_t{0});
    for (int i = 0; i < trials; ++i) {
      const bool final_call = final_seed != 0 && i == trials - 1;
      if (auto bad = staged(final_call ? final_seed : next_seed(), fresh || final_call)) return *bad;
      flusher_.flush(stream_);
      cudaStreamSynchronize(stream_);
      const auto t0 = std::chrono::steady_clock::now();
      ev.start(stream_);
      const int rc = forward_(timed_frame_.in.data(), static_cast<int32_t>(timed_frame_.in.size()),
                              timed_frame_.out.data(), static_cast<int32_t>(timed_frame_.out.size()),
                              timed_frame_.workspace.defined() ? timed_frame_.workspace.data_ptr()
                                                               : nullptr,
                              stream_);
      ev.stop(stream_);
      const auto e = cudaDeviceSynchronize();
      const auto t1 = std::chrono::steady_clock::now();
      if (e != cudaSuccess)
        return failure("runtime_error", "CUDA error while timing: " + cuda_text(e), true);
      if (rc != 0) return failure("runtime_error", "kf_forward returned " + std::to_string(rc));
      const double e_ms = ev.elapsed_ms();
      event_ms.push_back(e_ms);
      wall_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      if (slow_ms > 0 && e_ms > slow_ms && ++slow == i + 1 && slow >= protocol::slow_trials) break;
    }
    // The last call's outputs go to the reference server for a check of their own.
    const auto d0 = std::chrono::steady_clock::now();
    json reply = deliver(timed_outputs_, req);
    if (!reply.value("ok", false)) return reply;
    reply["staging_ms"] = staging_ms;
    reply["delivery_ms"] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - d0).count();
    reply["event_ms"] = event_ms;
    reply["wall_ms"] = wall_ms;
    reply["last_seed"] = last_seed;
    return reply;
  }

  // Copies of `outs` in memory of their own (CUDA IPC shares whole cudaMalloc allocations, and
  // torch's allocator carves tensors out of larger ones), as the reply with their IPC handles in
  // hex. The buffers are kept and reused by later checks and candidates (grown when too small): a
  // cudaMalloc and cudaFree per output and check were a third of verifying. Nothing when IPC
  // fails here: the caller falls back to files. A CUDA error while copying is the candidate's
  // (its kernels ran just before): fatal.
  std::optional<json> share(const std::vector<at::Tensor>& outs) {
    json handles = json::array();
    for (std::size_t i = 0; i < outs.size(); ++i) {
      const auto c = outs[i].contiguous();
      const std::size_t bytes = static_cast<std::size_t>(c.numel()) * c.element_size();
      if (shared_.size() <= i) shared_.emplace_back();
      shared_buffer& buf = shared_[i];
      if (buf.bytes < bytes || !buf.ptr) {
        buf.release();
        if (cudaMalloc(&buf.ptr, std::max<std::size_t>(bytes, 1)) != cudaSuccess) {
          buf.ptr = nullptr;
          break;
        }
        buf.bytes = std::max<std::size_t>(bytes, 1);
        if (cudaIpcGetMemHandle(&buf.handle, buf.ptr) != cudaSuccess) {
          buf.release();
          break;
        }
      }
      // On torch's stream, after whatever made `c` (a copy, were an output not contiguous).
      if (cudaMemcpyAsync(buf.ptr, c.data_ptr(), bytes, cudaMemcpyDeviceToDevice, cudaStreamLegacy) != cudaSuccess)
        break;
      handles.push_back(protocol::to_hex(&buf.handle, sizeof buf.handle));
    }
    // A device-to-device cudaMemcpy may return before it is done: the copies must be whole before
    // the reference server reads them.
    if (const auto e = cudaDeviceSynchronize(); e != cudaSuccess)
      return failure("runtime_error", "CUDA error after the candidate's calls: " + cuda_text(e), true);
    if (handles.size() != outs.size()) {
      release_shared();
      cudaGetLastError();  // the failed call's error is not sticky (the sync above passed): clear it
      return std::nullopt;
    }
    return json{{"ok", true}, {"ipc", handles}};
  }

  void release_shared() {
    for (auto& b : shared_) b.release();
    shared_.clear();
  }

  std::size_t shared_bytes() const {
    std::size_t n = 0;
    for (const auto& b : shared_) n += b.bytes;
    return n;
  }

  json unload() {
    timed_inputs_.clear();
    timed_outputs_.clear();
    timed_sets_.clear();
    timed_frame_ = call_frame{};
    timed_calls_ = 0;
    task_.reset();
    forward_ = nullptr;
    workspace_ = nullptr;
    if (lib_) ::dlclose(lib_);
    lib_ = nullptr;
    // The kept buffers hold this candidate's outputs, which the next candidate (often of the same
    // task and seed) must not find: cleared, or freed when large.
    if (shared_bytes() > kept_shared_limit) release_shared();
    for (auto& b : shared_) cudaMemsetAsync(b.ptr, 0, b.bytes, stream_);
    if (const auto e = cudaDeviceSynchronize(); e != cudaSuccess)  // this context is not to be trusted
      return json{{"ok", true}, {"recycle", true}, {"reason", "CUDA error at unload: " + cuda_text(e)}};
    // The kept output buffers are ours, not the candidate's: they do not count as a leak.
    if (meter_) {
      if (const auto held = held_bytes()) {
        const std::uint64_t now = *held - std::min<std::uint64_t>(*held, shared_bytes());
        const bool leaked = now > held_at_start_ + leak_limit;
        return json{{"ok", true}, {"recycle", leaked}, {"leak_check", protocol::own_usage_leak_check},
                    {"held_bytes", now}};
      }
    }
    const std::size_t now = free_bytes() + shared_bytes();
    const bool leaked = now + leak_limit < free_at_start_;
    return json{{"ok", true}, {"recycle", leaked}, {"leak_check", device_wide}, {"free_bytes", now}};
  }

  cudaStream_t stream_{};
  l2_flusher flusher_;
  std::optional<process_memory_meter> meter_;  ///< none: the leak check reads free memory
  unsigned outer_pid_ = 0;                     ///< this process as the supervisor sees it
  unsigned nvml_pid_ = 0;                      ///< the PID NVML reports this process by
  std::uint64_t held_at_start_ = 0;            ///< this process's usage after hello
  std::size_t free_at_start_ = 0;              ///< the GPU's free memory after hello
  void* lib_ = nullptr;
  forward_fn forward_ = nullptr;
  workspace_fn workspace_ = nullptr;
  std::optional<tasks::task> task_;
  std::map<std::uint64_t, std::vector<at::Tensor>> timed_sets_;  ///< the rotation's input sets
  std::vector<at::Tensor> timed_inputs_, timed_outputs_;          ///< what every timed call reads
  std::size_t timed_calls_ = 0;                                   ///< rotation position
  std::int64_t check_bytes_ = 0;  ///< the last check's input and output bytes
  call_frame timed_frame_;
  /// One output's buffer shared over CUDA IPC (cudaMalloc'd on its own: IPC shares whole
  /// allocations).
  struct shared_buffer {
    void* ptr = nullptr;
    std::size_t bytes = 0;
    cudaIpcMemHandle_t handle{};
    void release() {
      if (ptr) cudaFree(ptr);
      ptr = nullptr;
      bytes = 0;
    }
  };
  std::vector<shared_buffer> shared_;  ///< the last check's outputs, kept for later checks
};

}  // namespace

int candidate_child_main() {
  candidate_child child;
  return child.serve();
}

}  // namespace kforge::sandbox

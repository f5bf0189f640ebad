// `kforge sandbox-ref`: the trusted side of verification (protocol: child_protocol.hpp). It
// compiles task references, draws the same seeded inputs the candidate child draws, keeps the
// expected outputs (one computation per (task, seed, variant) serves a whole GRPO group), compares
// the candidate's outputs (read over CUDA IPC from the child's GPU memory, or from files), and
// times the eager baseline with CUDA events on the stream the reference runs on. No candidate code
// is ever loaded here.
#include <ATen/ATen.h>
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <fstream>
#include <list>
#include <map>
#include <optional>
#include <tuple>

#include <nlohmann/json.hpp>

#include "common/child_process.hpp"
#include "common/hash.hpp"
#include "sandbox/child_protocol.hpp"
#include "sandbox/children.hpp"
#include "sandbox/gpu_facts.hpp"
#include "sandbox/gpu_timing.hpp"
#include "model/torch_cache.hpp"
#include "tasks/aten_convert.hpp"
#include "tasks/inputs.hpp"
#include "tasks/reference.hpp"
#include "tasks/task_parser.hpp"

namespace kforge::sandbox {

namespace {

using json = nlohmann::json;

constexpr std::size_t task_budget = 512;
/// After a prepare or compare that touched an input set of at least this many bytes (inputs and
/// expected outputs), torch's cached free blocks go back to the driver. Why: the allocator keeps
/// every block it ever freed, so a server that computed a few large references held their
/// intermediates for good; in a 450 s run (2026-12-03) four servers held 20-28 GiB each against
/// a 4 GiB expected-output share, and 11 candidates ran out of GPU memory (infra_error). Small tasks keep
/// their blocks: releasing synchronizes the device and the next request would pay cudaMalloc.
/// Never after a time request, and timing is exclusive, so no release falls between the rounds.
constexpr std::int64_t release_after_bytes = protocol::large_set_bytes;

using protocol::failure;

struct compiled_task {
  tasks::task spec;
  tasks::reference ref;
};

/// (task hash, seed, variant)
using check_key = std::tuple<std::uint64_t, std::uint64_t, int>;

struct expected_entry {
  tasks::tensor_list inputs;
  tasks::tensor_list outputs;
  std::int64_t bytes = 0;
};

class reference_server {
 public:
  int serve() {
    return protocol::serve("reference server", [this](const nlohmann::json& req) { return dispatch(req); });
  }

 private:
  json dispatch(const json& req) {
    const std::string op = req.at("op").get<std::string>();
    if (op == "hello") {
      if (const auto b = req.value("cache_bytes", std::int64_t{0}); b > 0) expected_budget_ = b;
      return hello();
    }
    if (op == "prepare" || op == "compare") {
      large_ = false;
      try {
        json reply = op == "prepare" ? prepare(req) : compare(req);
        if (large_) model::release_torch_cache();
        return reply;
      } catch (...) {  // out of memory, most likely: what it had allocated is free now
        if (large_) model::release_torch_cache();
        throw;
      }
    }
    if (op == "time") return time(req);
    if (op == "release") {  // a large task's candidate is done: its oversize set goes now
      const bool dropped = drop_oversize();
      if (dropped) model::release_torch_cache();
      return json{{"ok", true}, {"released", dropped}};
    }
    return failure("infra_error", "reference server: unknown op '" + op + "'");
  }

  json hello() {
    if (const auto e = cudaSetDevice(0); e != cudaSuccess)
      return failure("infra_error", std::string("no usable GPU: ") + cudaGetErrorString(e), true);
    auto facts = query_gpu(0);
    if (!facts) return failure("infra_error", facts.err().message, true);
    if (const auto e = flusher_.init(static_cast<std::size_t>(facts->l2_bytes)); e != cudaSuccess)
      return failure("infra_error", std::string("L2 flush buffer: ") + cudaGetErrorString(e), true);
    (void)at::zeros({1}, at::device(at::kCUDA));
    return json{{"ok", true}, {"gpu", json::parse(to_json(*facts))}};
  }

  /// The compiled reference of the request's task (compiled once per task text).
  result<compiled_task*> task_of(const json& req, std::uint64_t& hash) {
    const std::string text = req.at("task").dump();
    hash = fnv1a64(text);
    if (auto it = tasks_.find(hash); it != tasks_.end()) return &it->second;
    auto t = tasks::parse_task(text, "supervisor");
    if (!t) return error{t.err().message};
    auto ref = tasks::reference::compile(*t);
    if (!ref) return error{ref.err().message};
    if (tasks_.size() >= task_budget) tasks_.clear();  // rare; recompiling is cheap
    return &tasks_.emplace(hash, compiled_task{std::move(*t), std::move(*ref)}).first->second;
  }

  /// The expected outputs of (task, seed, variant), computed once; marks the request large_ when
  /// they are (release_after_bytes).
  result<expected_entry*> expected(compiled_task& ct, std::uint64_t hash, std::uint64_t seed,
                                   int variant) {
    const check_key key{hash, seed, variant};
    if (auto it = expected_.find(key); it != expected_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.second);
      large_ = large_ || it->second.first.bytes >= release_after_bytes;
      return &it->second.first;
    }
    const bool earlier = large_;
    large_ = true;  // until its size is known: a reference that fails midway may have left blocks
    drop_oversize();
    const tasks::shape_choice which =
        variant == protocol::primary ? tasks::shape_choice{} : tasks::shape_choice{variant};
    auto inputs = tasks::make_inputs(ct.spec, seed, which, tasks::device::cuda(0));
    if (!inputs) return error{inputs.err().message};
    auto outputs = ct.ref.run(*inputs);
    if (!outputs) return error{outputs.err().message};
    expected_entry e{std::move(*inputs), std::move(*outputs), 0};
    for (const auto& t : e.inputs.tensors()) e.bytes += t.numel() * t.element_size();
    for (const auto& t : e.outputs.tensors()) e.bytes += t.numel() * t.element_size();
    large_ = earlier || e.bytes >= release_after_bytes;
    while (held_ + e.bytes > expected_budget_ && !lru_.empty()) {
      auto victim = expected_.find(lru_.back());
      held_ -= victim->second.first.bytes;
      large_ = large_ || victim->second.first.bytes >= release_after_bytes;  // its blocks go too
      expected_.erase(victim);
      lru_.pop_back();
    }
    held_ += e.bytes;
    lru_.push_front(key);
    auto [it, _] = expected_.emplace(key, std::make_pair(std::move(e), lru_.begin()));
    return &it->second.first;
  }

  json prepare(const json& req) {
    std::uint64_t hash = 0;
    auto ct = task_of(req, hash);
    if (!ct) return failure("infra_error", "reference failed: " + ct.err().message);
    json shapes = json::array();
    for (const auto& c : req.at("checks")) {
      auto e = expected(**ct, hash, c.at("seed").get<std::uint64_t>(), c.at("variant").get<int>());
      if (!e) return failure("infra_error", "reference failed: " + e.err().message);
      json outs = json::array();
      for (const auto& t : (*e)->outputs.tensors()) outs.push_back(t.sizes().vec());
      shapes.push_back(outs);
    }
    return json{{"ok", true}, {"output_shapes", shapes}};
  }

  // The candidate child's outputs from raw files it wrote (where CUDA IPC is not used).
  static std::optional<json> read_files(const std::vector<std::string>& files, const std::vector<at::Tensor>& want,
                                        tasks::tensor_list& got) {
    if (files.size() != want.size()) return failure("infra_error", "output file count mismatch");
    for (std::size_t i = 0; i < files.size(); ++i) {
      auto host = at::empty(want[i].sizes(), want[i].options().device(at::kCPU));
      const auto bytes = static_cast<std::streamsize>(host.numel() * host.element_size());
      std::ifstream is(files[i], std::ios::binary);
      is.read(static_cast<char*>(host.data_ptr()), bytes);
      if (is.gcount() != bytes) return failure("infra_error", "short output file " + files[i]);
      got.tensors().push_back(host.to(want[i].device()));
    }
    return std::nullopt;
  }

  // The driver's cuMemGetAddressRange, found through the runtime: linking libcuda would make the
  // kforge binary fail to start on hosts without a driver (compile-only workers).
  static PFN_cuMemGetAddressRange_v3020 address_range() {
    static const PFN_cuMemGetAddressRange_v3020 fn = [] {
      void* p = nullptr;
      cudaDriverEntryPointQueryResult found{};
      if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &p, 12000, cudaEnableDefault, &found) !=
              cudaSuccess ||
          found != cudaDriverEntryPointSuccess)
        p = nullptr;
      return reinterpret_cast<PFN_cuMemGetAddressRange_v3020>(p);
    }();
    return fn;
  }

  struct ipc_mapping {
    void* p = nullptr;
    ~ipc_mapping() {
      if (p != nullptr) cudaIpcCloseMemHandle(p);
    }
  };

  // The candidate child's outputs straight from its GPU memory (CUDA IPC handles): copied into this
  // server's memory and the mappings closed before anything is compared, so nothing the child does
  // later can touch them. The handles come from the child, where candidate code runs, so each
  // mapping is checked to hold the whole output before it is read (an honest child's buffer holds
  // at least the output's bytes: it keeps and reuses larger ones). A reply no honest child sends (a wrong handle count, a malformed
  // handle) is `bad_share`; a handle that does not open, cannot be measured or is too small is
  // ipc_unavailable (the runner then asks for files); a CUDA error while copying ends this server
  // (fatal: it is restarted) rather than leave it broken.
  std::optional<json> read_shared(const json& handles, const std::vector<at::Tensor>& want, tasks::tensor_list& got,
                                  std::string& bad_share) {
    if (!handles.is_array() || handles.size() != want.size()) {
      bad_share = "the child sent " + std::to_string(handles.size()) + " output handles for " +
                  std::to_string(want.size()) + " outputs";
      return std::nullopt;
    }
    for (std::size_t i = 0; i < want.size(); ++i) {
      cudaIpcMemHandle_t h;
      if (!handles[i].is_string() || !protocol::from_hex(handles[i].get<std::string>(), &h, sizeof h)) {
        bad_share = "output handle " + std::to_string(i) + " is malformed";
        return std::nullopt;
      }
      ipc_mapping m;
      if (const auto err = cudaIpcOpenMemHandle(&m.p, h, cudaIpcMemLazyEnablePeerAccess); err != cudaSuccess) {
        m.p = nullptr;
        cudaGetLastError();  // not sticky: clear it, or the next launch check here would report it
        return failure("infra_error", std::string(protocol::ipc_unavailable) + "output " + std::to_string(i) +
                                          ": " + cudaGetErrorString(err));
      }
      CUdeviceptr base = 0;
      std::size_t size = 0;
      const auto range = address_range();
      if (range == nullptr || range(&base, &size, reinterpret_cast<CUdeviceptr>(m.p)) != CUDA_SUCCESS)
        return failure("infra_error", std::string(protocol::ipc_unavailable) + "cannot measure output " +
                                          std::to_string(i) + "'s shared memory");
      const auto bytes = static_cast<std::size_t>(want[i].numel()) * want[i].element_size();
      const auto from = reinterpret_cast<CUdeviceptr>(m.p);
      // Too small: a forged handle, or a driver that measures IPC mappings otherwise than assumed
      // here. Either way nothing is read, and the check is done again through files, which give
      // the verdict (and cannot be forged: the runner accepts only the check's own file names).
      if (from < base || from - base + bytes > size)
        return failure("infra_error", std::string(protocol::ipc_unavailable) + "output " + std::to_string(i) +
                                          "'s shared memory holds " + std::to_string(size - (from - base)) +
                                          " bytes, the output takes " + std::to_string(bytes));
      got.tensors().push_back(at::from_blob(m.p, want[i].sizes(), want[i].options()).clone());
      if (const auto err = cudaDeviceSynchronize(); err != cudaSuccess)
        return failure("infra_error", std::string("copying a shared output failed: ") + cudaGetErrorString(err),
                       /*fatal=*/true);
    }
    return std::nullopt;
  }

  json compare(const json& req) {
    std::uint64_t hash = 0;
    auto ct = task_of(req, hash);
    if (!ct) return failure("infra_error", "reference failed: " + ct.err().message);
    const auto& c = req.at("check");
    auto e = expected(**ct, hash, c.at("seed").get<std::uint64_t>(), c.at("variant").get<int>());
    if (!e) return failure("infra_error", "reference failed: " + e.err().message);
    const auto& want = (*e)->outputs.tensors();
    tasks::tensor_list got;
    if (req.contains("ipc")) {
      std::string bad_share;
      if (auto bad = read_shared(req.at("ipc"), want, got, bad_share)) return *bad;
      if (!bad_share.empty()) return json{{"ok", true}, {"close", false}, {"bad_share", bad_share}};
    } else if (auto bad = read_files(req.at("files").get<std::vector<std::string>>(), want, got)) {
      return *bad;
    }
    auto cmp = tasks::compare((*e)->outputs, got, (*ct)->spec.tolerance);
    if (!cmp) return failure("infra_error", "compare: " + cmp.err().message);
    bool stale = false;
    if (!cmp->close) {
      // A result cached from an earlier call matches that call's expected output, not this one.
      for (const auto& prev : req.value("earlier", json::array())) {
        auto pe = expected(**ct, hash, prev.at("seed").get<std::uint64_t>(),
                           prev.at("variant").get<int>());
        if (!pe) continue;
        bool same_shapes = (*pe)->outputs.size() == got.size();
        for (std::size_t i = 0; same_shapes && i < got.size(); ++i)
          same_shapes = (*pe)->outputs.shape_of(i) == got.shape_of(i);
        if (!same_shapes) continue;
        auto old = tasks::compare((*pe)->outputs, got, (*ct)->spec.tolerance);
        if (old && old->close) stale = true;
      }
    }
    return json{{"ok", true},          {"close", cmp->close},
                {"max_abs", cmp->max_abs_error}, {"max_rel", cmp->max_rel_error},
                {"first_bad", cmp->first_bad},   {"bad_tensor", cmp->worst_tensor},
                {"bad_count", cmp->bad_count},   {"stale", stale}};
  }

  json time(const json& req) {
    std::uint64_t hash = 0;
    auto ct = task_of(req, hash);
    if (!ct) return failure("infra_error", "reference failed: " + ct.err().message);
    auto e = expected(**ct, hash, req.at("seed").get<std::uint64_t>(), protocol::primary);
    if (!e) return failure("infra_error", "reference failed: " + e.err().message);
    const int warmup = req.value("warmup", 0);
    const int trials = req.at("trials").get<int>();
    for (int i = 0; i < warmup; ++i)
      if (auto r = (**ct).ref.run((*e)->inputs); !r)
        return failure("infra_error", "reference failed: " + r.err().message);
    json event_ms = json::array();
    event_pair ev;
    for (int i = 0; i < trials; ++i) {
      // The reference runs on torch's current stream, the legacy default stream (0).
      flusher_.flush(nullptr);
      cudaDeviceSynchronize();
      ev.start(nullptr);
      auto r = (**ct).ref.run((*e)->inputs);
      ev.stop(nullptr);
      if (const auto err = cudaDeviceSynchronize(); err != cudaSuccess)
        return failure("infra_error", std::string("baseline: ") + cudaGetErrorString(err), true);
      if (!r) return failure("infra_error", "reference failed: " + r.err().message);
      event_ms.push_back(ev.elapsed_ms());
    }
    return json{{"ok", true}, {"event_ms", event_ms}};
  }

  /// Drops the entries larger than this server's whole share; whether it dropped one. One is kept
  /// past its computation only for the requests of the candidate it was computed for: it goes when
  /// the runner says that candidate is done ("release"), or at the latest before anything else is
  /// computed. Why: kept, each of a GPU's four servers held its last large set (KernelBench's
  /// level-1 sets are 12-14 GiB with their outputs), and the next large candidate's child ran out
  /// of memory beside them (H100, 2026-12-06); dropped only at the next computation, three idle
  /// servers still held 36 GiB when a 38 GiB child asked for 6 more (H100, 2026-12-06).
  bool drop_oversize() {
    bool dropped = false;
    for (auto it = lru_.begin(); it != lru_.end();) {
      auto entry = expected_.find(*it);
      if (entry->second.first.bytes <= expected_budget_) {
        ++it;
        continue;
      }
      held_ -= entry->second.first.bytes;
      expected_.erase(entry);
      it = lru_.erase(it);
      dropped = true;
    }
    return dropped;
  }

  l2_flusher flusher_;
  std::map<std::uint64_t, compiled_task> tasks_;
  std::list<check_key> lru_;
  std::map<check_key, std::pair<expected_entry, std::list<check_key>::iterator>> expected_;
  std::int64_t held_ = 0;
  bool large_ = false;  ///< this request touched a large input set (release_after_bytes)
  /// Expected outputs kept on the GPU, least recently used dropped first beyond this; hello's
  /// cache_bytes sets this server's share.
  std::int64_t expected_budget_ = protocol::expected_cache_bytes;
};

}  // namespace

int reference_server_main() {
  reference_server server;
  return server.serve();
}

}  // namespace kforge::sandbox

#include "trainer/weight_broadcast.hpp"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <cuda_runtime.h>
#include <torch/torch.h>

#include "common/hash.hpp"
#include "model/dtype_names.hpp"
#include "trainer/weight_channel.hpp"

namespace kforge::trainer {

namespace {

// The parameters in broadcast order: named_parameters(), a tensor shared by two names (tied
// weights) once.
std::vector<std::pair<std::string, at::Tensor>> broadcast_order(model::CausalLMImpl& m) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  std::vector<const void*> seen;
  for (const auto& p : m.named_parameters()) {
    const void* ptr = p.value().data_ptr();
    if (std::find(seen.begin(), seen.end(), ptr) != seen.end()) continue;
    seen.push_back(ptr);
    out.emplace_back(p.key(), p.value());
  }
  return out;
}

std::int64_t total_numel(const std::vector<std::pair<std::string, at::Tensor>>& ps) {
  std::int64_t n = 0;
  for (const auto& [name, t] : ps) n += t.numel();
  return n;
}

// The device's queued work (the copies into or out of a staging buffer) is done.
status synchronize(int device, const char* what) {
  if (cudaSetDevice(device) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess)
    return error{std::string("weight broadcast: synchronising cuda:") + std::to_string(device) + " after " + what +
                 " failed"};
  return {};
}

// The hash of the parameters' names and shapes, in broadcast order.
std::uint64_t hash_of(const std::vector<std::pair<std::string, at::Tensor>>& ps) {
  std::uint64_t h = fnv1a64("kforge weight layout 1");
  for (const auto& [name, t] : ps) {
    h = fnv1a64(name.data(), name.size() + 1, h);  // the terminator separates names
    for (auto d : t.sizes()) h = fnv1a64(&d, sizeof d, h);
  }
  return h;
}

}  // namespace

std::uint64_t layout_hash(model::CausalLMImpl& m) { return hash_of(broadcast_order(m)); }

// ---- sender ---------------------------------------------------------------------------------------

struct weight_sender::impl {
  int device = 0;
  nccl_id id;
  weight_channel channel;
  at::Tensor staging;
  std::mutex mu;
  std::condition_variable cv;
  bool busy = false;      ///< a broadcast is in flight on the thread
  bool stopping = false;
  status last;            ///< how the last broadcast ended
  std::thread thread;

  impl(int d, nccl_id i, int ranks, std::chrono::milliseconds timeout)
      : device(d), id(i), channel(weight_channel_options{i, 0, ranks, d, timeout}) {
    thread = std::thread([this] { run(); });
  }
  ~impl() {
    {
      std::lock_guard lock(mu);
      stopping = true;
    }
    channel.request_abort();  // a sampler that has stopped will never join the last broadcast
    cv.notify_all();
    thread.join();
  }

  void run() {
    std::unique_lock lock(mu);
    for (;;) {
      cv.wait(lock, [&] { return stopping || busy; });
      if (stopping) return;
      lock.unlock();
      status s = channel.transfer(staging.data_ptr(), static_cast<std::size_t>(staging.nbytes()));
      lock.lock();
      last = std::move(s);
      busy = false;
      cv.notify_all();
    }
  }
};

weight_sender::weight_sender(std::unique_ptr<impl> p) : p_(std::move(p)) {}
weight_sender::~weight_sender() = default;

result<std::unique_ptr<weight_sender>> weight_sender::create(int device, int ranks,
                                                             std::chrono::milliseconds timeout) {
  if (ranks < 2) return error{"weight sender: a group needs the trainer and at least one sampler"};
  auto id = new_nccl_id();
  if (!id) return error{"weight sender: " + id.message()};
  return std::unique_ptr<weight_sender>(new weight_sender(std::make_unique<impl>(device, *id, ranks, timeout)));
}

result<broadcast_info> weight_sender::publish(model::CausalLMImpl& m, std::uint64_t version) {
  auto& p = *p_;
  std::unique_lock lock(p.mu);
  p.cv.wait(lock, [&] { return !p.busy; });  // the channel's timeout bounds this wait
  if (!p.last) return error{"weight sender: the broadcast before version " + std::to_string(version) + ": " +
                            p.last.message()};
  if (p.channel.broken()) return error{"weight sender: the channel is broken"};
  const auto params = broadcast_order(m);
  if (params.empty()) return error{"weight sender: the model has no parameters"};
  const at::ScalarType dtype = params.front().second.scalar_type();
  const std::int64_t n = total_numel(params);
  {
    torch::NoGradGuard no_grad;
    if (!p.staging.defined() || p.staging.numel() != n || p.staging.scalar_type() != dtype)
      p.staging = torch::empty({n}, at::TensorOptions().dtype(dtype).device(at::kCUDA, p.device));
    std::int64_t off = 0;
    for (const auto& [name, t] : params) {
      if (!t.is_cuda() || t.device().index() != p.device)
        return error{"weight sender: parameter " + name + " is not on cuda:" + std::to_string(p.device)};
      p.staging.narrow(0, off, t.numel()).copy_(t.detach().reshape({-1}));
      off += t.numel();
    }
  }
  if (auto s = synchronize(p.device, "the copy into the staging buffer"); !s) return s.err();
  broadcast_info b;
  b.version = version;
  b.id = p.id;
  b.ranks = p.channel.options().size;
  b.bytes = static_cast<std::uint64_t>(p.staging.nbytes());
  b.layout_hash = hash_of(params);
  b.dtype = model::dtype_name(dtype);
  p.busy = true;
  p.cv.notify_all();
  return b;
}

// ---- receiver -------------------------------------------------------------------------------------

struct weight_receiver::impl {
  int device = 0;
  int rank = 1;
  std::chrono::milliseconds timeout;
  std::uint64_t hash = 0;       ///< of the receiving model
  std::int64_t numel = 0;       ///< of the receiving model's parameters
  std::unique_ptr<weight_channel> channel;
  at::Tensor staging;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<broadcast_info> queue;
  std::uint64_t last_queued = 0;
  /// The version in the staging buffer and how receiving it went; unset: the buffer is free.
  std::optional<std::pair<std::uint64_t, status>> staged;
  bool stopping = false;
  std::string stop_reason;
  std::thread thread;

  void start() { thread = std::thread([this] { run(); }); }
  void stop(const std::string& why) {
    {
      std::lock_guard lock(mu);
      if (!stopping) stop_reason = why;
      stopping = true;
      if (channel) channel->request_abort();
    }
    cv.notify_all();
  }
  ~impl() {
    stop("the sampler is gone");
    if (thread.joinable()) thread.join();
  }

  // One version: checked against this model, then received (joining the group the first time).
  status receive(const broadcast_info& b) {
    const std::string where = "weight receiver rank " + std::to_string(rank) + ": version " +
                              std::to_string(b.version) + ": ";
    if (b.layout_hash != hash)
      return error{where + "the trainer's model has other parameters than this sampler's (layout hash differs)"};
    const auto dtype = model::dtype_named(b.dtype);
    if (!dtype) return error{where + "unknown dtype \"" + b.dtype + "\""};
    const auto want = static_cast<std::uint64_t>(numel) * static_cast<std::uint64_t>(c10::elementSize(*dtype));
    if (b.bytes != want)
      return error{where + std::to_string(b.bytes) + " bytes announced, this model's parameters take " +
                   std::to_string(want) + " in " + b.dtype};
    if (b.ranks < 2 || rank >= b.ranks)
      return error{where + "this sampler is rank " + std::to_string(rank) + " of a group of " + std::to_string(b.ranks)};
    if (!channel) {
      std::lock_guard lock(mu);
      if (stopping) return error{where + "stopping"};
      channel = std::make_unique<weight_channel>(weight_channel_options{b.id, rank, b.ranks, device, timeout});
    } else if (channel->options().id.bytes != b.id.bytes) {
      return error{where + "announced on another NCCL group than the earlier versions"};
    }
    if (!staging.defined() || staging.scalar_type() != *dtype)
      staging = torch::empty({numel}, at::TensorOptions().dtype(*dtype).device(at::kCUDA, device));
    return channel->transfer(staging.data_ptr(), static_cast<std::size_t>(staging.nbytes()));
  }

  void run() {
    std::unique_lock lock(mu);
    for (;;) {
      cv.wait(lock, [&] { return stopping || (!queue.empty() && !staged); });
      if (stopping) return;
      const broadcast_info b = queue.front();
      queue.pop_front();
      lock.unlock();
      status s = receive(b);
      lock.lock();
      staged.emplace(b.version, std::move(s));
      cv.notify_all();
    }
  }
};

weight_receiver::weight_receiver(std::unique_ptr<impl> p) : p_(std::move(p)) {}
weight_receiver::~weight_receiver() = default;

result<std::unique_ptr<weight_receiver>> weight_receiver::create(model::CausalLMImpl& m, int device, int rank,
                                                                 std::chrono::milliseconds timeout) {
  if (rank < 1) return error{"weight receiver: rank " + std::to_string(rank) + ": rank 0 is the trainer"};
  auto p = std::make_unique<impl>();
  p->device = device;
  p->rank = rank;
  p->timeout = timeout;
  const auto params = broadcast_order(m);
  p->hash = hash_of(params);
  p->numel = total_numel(params);
  p->start();
  return std::unique_ptr<weight_receiver>(new weight_receiver(std::move(p)));
}

void weight_receiver::announce(const broadcast_info& b) {
  auto& p = *p_;
  std::lock_guard lock(p.mu);
  if (b.version <= p.last_queued) return;
  p.last_queued = b.version;
  p.queue.push_back(b);
  p.cv.notify_all();
}

void weight_receiver::stop(const std::string& why) { p_->stop(why); }

status weight_receiver::apply(const broadcast_info& b, model::CausalLMImpl& m) {
  announce(b);
  auto& p = *p_;
  std::unique_lock lock(p.mu);
  for (;;) {
    // The receiving thread's own timeout bounds this wait.
    p.cv.wait(lock, [&] { return p.stopping || p.staged.has_value(); });
    if (p.stopping) return error{"weight receiver: stopped (" + p.stop_reason + ")"};
    if (p.staged->first >= b.version) break;
    p.staged.reset();  // an older version nobody applied: make room for this one
    p.cv.notify_all();
  }
  auto [version, received] = std::move(*p.staged);
  if (version != b.version) {  // a newer one: this version was never announced to us in order
    p.staged.emplace(version, std::move(received));
    return error{"weight receiver: version " + std::to_string(b.version) + " asked for, " +
                 std::to_string(version) + " received"};
  }
  status s = std::move(received);
  if (s) {
    // Without the lock, so the pump's announce() never waits for a copy; `staged` stays set until
    // the copy is done, so the receiving thread does not touch the buffer meanwhile.
    lock.unlock();
    torch::NoGradGuard no_grad;
    std::int64_t off = 0;
    for (const auto& [name, t] : broadcast_order(m)) {
      t.view({-1}).copy_(p.staging.narrow(0, off, t.numel()));
      off += t.numel();
    }
    s = synchronize(p.device, "the copy out of the staging buffer");
    lock.lock();
  }
  p.staged.reset();
  p.cv.notify_all();
  return s;
}

}  // namespace kforge::trainer

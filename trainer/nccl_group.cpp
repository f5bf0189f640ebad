#include "trainer/nccl_group.hpp"

#include <cstring>
#include <string>

#include <ATen/ATen.h>

#include "trainer/cuda_check.hpp"
#include "trainer/nccl_wait.hpp"

namespace kforge::trainer {

namespace {

static_assert(sizeof(ncclUniqueId) == sizeof(nccl_id::bytes), "NCCL_UNIQUE_ID_BYTES changed");

result<ncclDataType_t> nccl_type(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return ncclFloat32;
    case at::kDouble: return ncclFloat64;
    case at::kBFloat16: return ncclBfloat16;
    case at::kHalf: return ncclFloat16;
    case at::kInt: return ncclInt32;
    case at::kLong: return ncclInt64;
    default: break;
  }
  return error{std::string("nccl group: unsupported dtype ") + c10::toString(t.scalar_type())};
}

std::string who(int rank, int size) {
  return "nccl group rank " + std::to_string(rank) + " of " + std::to_string(size) + ": ";
}

class nccl_rank final : public collective {
 public:
  nccl_rank(ncclComm_t comm, int rank, int size, int device, nccl_group_options o)
      : comm_(comm), rank_(rank), size_(size), device_(device), o_(std::move(o)) {}
  ~nccl_rank() override {
    if (!broken_) {
      // Where a rank process has died, destroying could wait for it: abort instead.
      if (o_.give_up && o_.give_up())
        ncclCommAbort(comm_);
      else
        ncclCommDestroy(comm_);
    }
    if (side_ != nullptr) cudaStreamDestroy(side_);
    if (ready_ != nullptr) cudaEventDestroy(ready_);
    if (done_ != nullptr) cudaEventDestroy(done_);
  }
  nccl_rank(const nccl_rank&) = delete;
  nccl_rank& operator=(const nccl_rank&) = delete;

  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return size_; }
  bool sums_in_background() const noexcept override { return o_.background_sums; }

  status all_reduce_sum(const std::vector<at::Tensor>& tensors) override {
    if (auto s = wait_started(); !s) return s;  // one order of calls on the communicator
    return each(tensors, "all_reduce_sum", nullptr, [&](void* p, std::size_t n, ncclDataType_t dt, cudaStream_t st) {
      return ncclAllReduce(p, p, n, dt, ncclSum, comm_, st);
    });
  }

  status broadcast(const std::vector<at::Tensor>& tensors, int root) override {
    if (root < 0 || root >= size_)
      return error{"nccl group: broadcast root " + std::to_string(root) + " outside a group of " + std::to_string(size_)};
    if (auto s = wait_started(); !s) return s;
    return each(tensors, "broadcast", nullptr, [&](void* p, std::size_t n, ncclDataType_t dt, cudaStream_t st) {
      return ncclBroadcast(p, p, n, dt, root, comm_, st);
    });
  }

  // NCCL's own reduce-scatter and all-gather: each rank sends and keeps 1/size of the traffic an
  // all-reduce has. The sum's order is NCCL's, as for all_reduce_sum.
  status reduce_scatter_sum(const at::Tensor& input, const at::Tensor& output) override {
    if (auto why = chunks("reduce_scatter_sum", input, output); !why.empty()) return error{why};
    if (auto s = wait_started(); !s) return s;
    const void* in = input.data_ptr();
    return each({output}, "reduce_scatter_sum", nullptr, [&](void* out, std::size_t n, ncclDataType_t dt, cudaStream_t st) {
      return ncclReduceScatter(in, out, n, dt, ncclSum, comm_, st);
    });
  }

  status all_gather(const at::Tensor& input, const at::Tensor& output) override {
    if (auto why = chunks("all_gather", output, input); !why.empty()) return error{why};
    if (auto s = wait_started(); !s) return s;
    void* out = output.data_ptr();
    return each({input}, "all_gather", nullptr, [&](void* in, std::size_t n, ncclDataType_t dt, cudaStream_t st) {
      return ncclAllGather(in, out, n, dt, comm_, st);
    });
  }

  // On a stream of this rank's own, after an event on the default stream (the work that wrote the
  // tensors); the host does not wait.
  status all_reduce_sum_start(const std::vector<at::Tensor>& tensors) override {
    if (!o_.background_sums) return all_reduce_sum(tensors);
    if (side_ == nullptr) {
      device_scope on(device_);
      if (!on || cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking) != cudaSuccess ||
          cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming) != cudaSuccess ||
          cudaEventCreateWithFlags(&done_, cudaEventDisableTiming) != cudaSuccess)
        return fail("cannot create the stream and events for background sums");
    }
    auto s = each(tensors, "all_reduce_sum_start", side_, [&](void* p, std::size_t n, ncclDataType_t dt, cudaStream_t st) {
      return ncclAllReduce(p, p, n, dt, ncclSum, comm_, st);
    });
    if (s) pending_ = true;
    return s;
  }

  // The default stream waits for the background sums (no host wait for that), and the host polls
  // them like any call, so a dead peer fails the step here rather than hanging it.
  status wait_started() override {
    if (!pending_) return {};
    pending_ = false;
    device_scope on(device_);
    if (!on) return fail("cannot select cuda:" + std::to_string(device_));
    if (cudaStreamWaitEvent(nullptr, done_, 0) != cudaSuccess) return fail("cannot order the default stream after the sums");
    const std::string what = "the background sums";
    if (auto why = drain_event(comm_, done_, {nccl_clock::now() + o_.timeout, o_.give_up, what, late(what.c_str())});
        !why.empty())
      return fail(why);
    return {};
  }

 private:
  std::string late(const char* what) const {
    return std::string(what) + " did not finish within " + std::to_string(o_.timeout.count()) +
           " ms: a rank is gone or stuck";
  }

  // Why `big` and `small` do not fit a reduce-scatter or all-gather (big: size_ chunks of small, one
  // dtype, both contiguous on this rank's device); empty when they do. `each` checks `small` again.
  // The ranks run the same code on the same shapes, so they fail these checks together.
  std::string chunks(const char* what, const at::Tensor& big, const at::Tensor& small) const {
    const std::string where = who(rank_, size_) + what + ": ";
    if (!big.defined() || !small.defined()) return where + "an undefined tensor";
    if (!big.is_cuda() || big.device().index() != device_ || !big.is_contiguous())
      return where + "must be a contiguous tensor on cuda:" + std::to_string(device_);
    if (big.scalar_type() != small.scalar_type() || big.numel() != small.numel() * size_)
      return where + std::to_string(big.numel()) + " elements are not " + std::to_string(size_) + " chunks of " +
             std::to_string(small.numel()) + " of the same dtype";
    return {};
  }

  // Checks every tensor first (a rank that returns early would leave the others waiting in NCCL;
  // the ranks run the same code on the same shapes, so they fail the same checks), then issues the
  // calls as one NCCL group: on the default stream, waited for; or on `side` (the background
  // stream), after the default stream's work so far, with done_ recorded after them.
  template <class Op>
  status each(const std::vector<at::Tensor>& tensors, const char* what, cudaStream_t side, Op op) {
    if (broken_) return error{who(rank_, size_) + what + ": the group is broken by an earlier failure"};
    std::vector<ncclDataType_t> types;
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      const at::Tensor& t = tensors[i];
      const std::string where = who(rank_, size_) + what + ": tensor " + std::to_string(i) + ": ";
      if (!t.defined() || !t.is_cuda() || t.device().index() != device_ || !t.is_contiguous())
        return error{where + "must be a contiguous tensor on cuda:" + std::to_string(device_)};
      auto dt = nccl_type(t);
      if (!dt) return error{where + dt.message()};
      types.push_back(*dt);
    }
    device_scope on(device_);  // the calling (actor) thread's current device is left as it was
    if (!on) return error{who(rank_, size_) + "cannot select cuda:" + std::to_string(device_)};
    const nccl_wait w{nccl_clock::now() + o_.timeout, o_.give_up, what, late(what)};
    if (side != nullptr &&
        (cudaEventRecord(ready_, nullptr) != cudaSuccess || cudaStreamWaitEvent(side, ready_, 0) != cudaSuccess))
      return fail(std::string(what) + ": cannot order the background stream after the default stream");
    KFORGE_NCCL_TRY(ncclGroupStart());
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      const ncclResult_t r = op(tensors[i].data_ptr(), static_cast<std::size_t>(tensors[i].numel()), types[i], side);
      if (r != ncclSuccess && r != ncclInProgress) {
        ncclGroupEnd();
        return fail(std::string(what) + ": " + ncclGetErrorString(r));
      }
    }
    // Enqueued once the (non-blocking) communicator settles.
    if (auto why = settle(comm_, ncclGroupEnd(), {w.deadline, w.stop, std::string("enqueuing ") + what, w.late});
        !why.empty())
      return fail(why);
    if (side != nullptr) {
      if (cudaEventRecord(done_, side) != cudaSuccess) return fail(std::string(what) + ": cannot record its end");
      return {};
    }
    // Done once the default stream has run them. The step after reads the sums (the gradient norm
    // goes to the host), so little is lost by waiting here, and a rank that died mid-step fails
    // the step (after an abort) instead of hanging every other.
    if (auto why = drain(comm_, nullptr, w); !why.empty()) return fail(why);
    return {};
  }

  // Aborting ends the NCCL kernels still waiting for a peer; the group stays broken.
  status fail(const std::string& why) {
    if (!broken_) ncclCommAbort(comm_);
    broken_ = true;
    pending_ = false;
    return error{who(rank_, size_) + why};
  }

  // Makes `device` current for a scope and restores the previous one.
  struct device_scope {
    explicit device_scope(int device) {
      ok_ = cudaGetDevice(&previous_) == cudaSuccess && cudaSetDevice(device) == cudaSuccess;
    }
    ~device_scope() {
      if (previous_ >= 0) cudaSetDevice(previous_);
    }
    explicit operator bool() const { return ok_; }
    int previous_ = -1;
    bool ok_ = false;
  };

  ncclComm_t comm_;
  int rank_, size_, device_;
  nccl_group_options o_;
  bool broken_ = false;
  cudaStream_t side_ = nullptr;                       ///< background sums (all_reduce_sum_start)
  cudaEvent_t ready_ = nullptr, done_ = nullptr;      ///< before / after them
  bool pending_ = false;                              ///< started sums not waited for yet
};

}  // namespace

result<nccl_id> new_nccl_id() {
  ncclUniqueId raw;
  KFORGE_NCCL_TRY(ncclGetUniqueId(&raw));
  nccl_id id;
  std::memcpy(id.bytes.data(), &raw, sizeof raw);
  return id;
}

result<std::shared_ptr<collective>> make_nccl_group(const nccl_id& id, int rank, int size, int device,
                                                    nccl_group_options o) {
  if (size < 1 || rank < 0 || rank >= size)
    return error{"nccl group: rank " + std::to_string(rank) + " of " + std::to_string(size) + " is not a rank"};
  ncclUniqueId raw;
  std::memcpy(&raw, id.bytes.data(), sizeof raw);
  KFORGE_CUDA_TRY(cudaSetDevice(device));
  ncclComm_t comm = nullptr;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // joining and every call can then be given up (nccl_wait.hpp)
  const ncclResult_t r = ncclCommInitRankConfig(&comm, size, raw, rank, &config);
  if (comm == nullptr) return error{who(rank, size) + "joining failed: " + ncclGetErrorString(r)};
  if (auto why = settle(comm, r == ncclSuccess ? ncclInProgress : r,
                        {nccl_clock::now() + o.join_timeout, o.give_up, "joining",
                         "the other ranks did not join within " + std::to_string(o.join_timeout.count()) + " ms"});
      !why.empty()) {
    ncclCommAbort(comm);
    return error{who(rank, size) + why};
  }
  return std::shared_ptr<collective>(std::make_shared<nccl_rank>(comm, rank, size, device, std::move(o)));
}

}  // namespace kforge::trainer

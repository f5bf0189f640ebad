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
    if (broken_) return;  // aborted already
    // Where a rank process has died, destroying could wait for it: abort instead.
    if (o_.give_up && o_.give_up())
      ncclCommAbort(comm_);
    else
      ncclCommDestroy(comm_);
  }
  nccl_rank(const nccl_rank&) = delete;
  nccl_rank& operator=(const nccl_rank&) = delete;

  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return size_; }

  status all_reduce_sum(const std::vector<at::Tensor>& tensors) override {
    return each(tensors, "all_reduce_sum", [&](void* p, std::size_t n, ncclDataType_t dt) {
      return ncclAllReduce(p, p, n, dt, ncclSum, comm_, /*stream=*/nullptr);
    });
  }

  status broadcast(const std::vector<at::Tensor>& tensors, int root) override {
    if (root < 0 || root >= size_)
      return error{"nccl group: broadcast root " + std::to_string(root) + " outside a group of " + std::to_string(size_)};
    return each(tensors, "broadcast", [&](void* p, std::size_t n, ncclDataType_t dt) {
      return ncclBroadcast(p, p, n, dt, root, comm_, /*stream=*/nullptr);
    });
  }

 private:
  // Checks every tensor first (a rank that returns early would leave the others waiting in NCCL;
  // the ranks run the same code on the same shapes, so they fail the same checks), then issues the
  // calls as one NCCL group.
  template <class Op>
  status each(const std::vector<at::Tensor>& tensors, const char* what, Op op) {
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
    const auto deadline = nccl_clock::now() + o_.timeout;
    const std::string late = std::string(what) + " did not finish within " + std::to_string(o_.timeout.count()) +
                             " ms: a rank is gone or stuck";
    KFORGE_NCCL_TRY(ncclGroupStart());
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      const ncclResult_t r = op(tensors[i].data_ptr(), static_cast<std::size_t>(tensors[i].numel()), types[i]);
      if (r != ncclSuccess && r != ncclInProgress) {
        ncclGroupEnd();
        return fail(std::string(what) + ": " + ncclGetErrorString(r));
      }
    }
    // Enqueued once the (non-blocking) communicator settles; done once the stream has run them.
    // The step after reads the sums (the gradient norm goes to the host), so little is lost by
    // waiting here, and a rank that died mid-step fails the step (after an abort) instead of
    // hanging every other.
    if (auto why = settle(comm_, ncclGroupEnd(), {deadline, o_.give_up, std::string("enqueuing ") + what, late});
        !why.empty())
      return fail(why);
    if (auto why = drain(comm_, cudaStreamLegacy, {deadline, o_.give_up, what, late}); !why.empty())
      return fail(why);
    return {};
  }

  // Aborting ends the NCCL kernels still waiting for a peer; the group stays broken.
  status fail(const std::string& why) {
    ncclCommAbort(comm_);
    broken_ = true;
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

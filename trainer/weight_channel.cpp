#include "trainer/weight_channel.hpp"

#include <cstring>
#include <string>

#include "trainer/cuda_check.hpp"
#include "trainer/nccl_wait.hpp"

namespace kforge::trainer {

namespace {

std::string who(const weight_channel_options& o) {
  return "weight channel rank " + std::to_string(o.rank) + " of " + std::to_string(o.size) + " (cuda:" +
         std::to_string(o.device) + "): ";
}

}  // namespace

struct weight_channel::state {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  bool joined = false;
};

weight_channel::weight_channel(weight_channel_options o) : o_(o), s_(std::make_unique<state>()) {}

weight_channel::~weight_channel() {
  if (s_->comm != nullptr && !broken_) {
    // A broken communicator was aborted already. After a requested abort (a peer may be gone)
    // destroying could wait for it, so abort instead.
    if (abort_) ncclCommAbort(s_->comm);
    else ncclCommDestroy(s_->comm);
  }
  if (s_->stream != nullptr) cudaStreamDestroy(s_->stream);
}

status weight_channel::fail(const std::string& why) {
  if (s_->comm != nullptr && !broken_) ncclCommAbort(s_->comm);  // ends kernels still waiting on peers
  broken_ = true;
  return error{who(o_) + why};
}

// Joins without blocking forever: the communicator is made non-blocking (NCCL's config) and its
// state polled until every rank is in or the timeout passes.
status weight_channel::join() {
  if (o_.size < 2 || o_.rank < 0 || o_.rank >= o_.size)
    return fail("rank " + std::to_string(o_.rank) + " of " + std::to_string(o_.size) + " is not a rank");
  if (cudaSetDevice(o_.device) != cudaSuccess) return fail("cannot select the device");
  if (cudaStreamCreateWithFlags(&s_->stream, cudaStreamNonBlocking) != cudaSuccess)
    return fail("cannot create its stream");
  ncclUniqueId raw;
  std::memcpy(&raw, o_.id.bytes.data(), sizeof raw);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const ncclResult_t r = ncclCommInitRankConfig(&s_->comm, o_.size, raw, o_.rank, &config);
  // Whatever the call answered, the communicator's own state says when every rank is in.
  if (auto why = settle(s_->comm, r == ncclSuccess ? ncclInProgress : r,
                        {nccl_clock::now() + o_.timeout, stopping(), "joining",
                         "the other ranks did not join within " + std::to_string(o_.timeout.count()) + " ms"});
      !why.empty())
    return fail(why);
  s_->joined = true;
  return {};
}

status weight_channel::transfer(void* data, std::size_t bytes) {
  if (broken_) return error{who(o_) + "broken by an earlier failure"};
  if (abort_) return fail("aborted");
  if (!s_->joined)
    if (auto s = join(); !s) return s;
  if (cudaSetDevice(o_.device) != cudaSuccess) return fail("cannot select the device");
  const auto deadline = nccl_clock::now() + o_.timeout;
  if (auto why = settle(s_->comm, ncclBroadcast(data, data, bytes, ncclUint8, 0, s_->comm, s_->stream),
                        {deadline, stopping(), "enqueuing the broadcast", "the broadcast was not enqueued within the timeout"});
      !why.empty())
    return fail(why);
  // Done when the stream is; a peer that never joins keeps it busy.
  if (auto why = drain(s_->comm, s_->stream,
                       {deadline, stopping(), "waiting for the broadcast",
                        "the broadcast of " + std::to_string(bytes) + " bytes did not finish within " +
                            std::to_string(o_.timeout.count()) +
                            " ms: a rank did not take it (a sampler still in a long generation batch, stopped, "
                            "or refusing the version: see its log)"});
      !why.empty())
    return fail(why);
  return {};
}

}  // namespace kforge::trainer

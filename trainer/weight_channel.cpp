#include "trainer/weight_channel.hpp"

#include <atomic>
#include <cstring>
#include <string>
#include <thread>

#include "trainer/cuda_check.hpp"

namespace kforge::trainer {

namespace {

using clock = std::chrono::steady_clock;

std::string who(const weight_channel_options& o) {
  return "weight channel rank " + std::to_string(o.rank) + " of " + std::to_string(o.size) + " (cuda:" +
         std::to_string(o.device) + "): ";
}

// A non-blocking communicator answers "in progress" while it joins or enqueues a call: polls its
// state until it settles, the channel is asked to abort, or `deadline` passes. Empty when it
// settled on success, else why not (`late` for the deadline).
std::string settle(ncclComm_t comm, ncclResult_t r, clock::time_point deadline, const std::atomic<bool>& abort,
                   const std::string& what, const std::string& late) {
  while (r == ncclInProgress) {
    if (ncclCommGetAsyncError(comm, &r) != ncclSuccess) return what + ": cannot read the communicator's state";
    if (r != ncclInProgress) break;
    if (abort) return "aborted while " + what;
    if (clock::now() > deadline) return late;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (r != ncclSuccess) return what + " failed: " + ncclGetErrorString(r);
  return {};
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
  if (auto why = settle(s_->comm, r == ncclSuccess ? ncclInProgress : r, clock::now() + o_.timeout, abort_, "joining",
                        "the other ranks did not join within " + std::to_string(o_.timeout.count()) + " ms");
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
  const auto deadline = clock::now() + o_.timeout;
  if (auto why = settle(s_->comm, ncclBroadcast(data, data, bytes, ncclUint8, 0, s_->comm, s_->stream), deadline,
                        abort_, "enqueuing the broadcast", "the broadcast was not enqueued within the timeout");
      !why.empty())
    return fail(why);
  // Done when the stream is; a peer that never joins keeps it busy, so poll against the deadline.
  for (;;) {
    const cudaError_t q = cudaStreamQuery(s_->stream);
    if (q == cudaSuccess) return {};
    if (q != cudaErrorNotReady) return fail(std::string("broadcast: ") + cudaGetErrorString(q));
    ncclResult_t async = ncclSuccess;
    if (ncclCommGetAsyncError(s_->comm, &async) == ncclSuccess && async != ncclSuccess && async != ncclInProgress)
      return fail(std::string("broadcast: ") + ncclGetErrorString(async));
    if (abort_) return fail("aborted while waiting for the other ranks");
    if (clock::now() > deadline)
      return fail("the broadcast of " + std::to_string(bytes) + " bytes did not finish within " +
                  std::to_string(o_.timeout.count()) +
                  " ms: a rank did not take it (a sampler still in a long generation batch, stopped, "
                  "or refusing the version: see its log)");
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

}  // namespace kforge::trainer

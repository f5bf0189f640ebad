#pragma once
// Waiting on non-blocking NCCL communicators without ever blocking for good: the weight channel
// (weight_channel.hpp) and the data-parallel group (nccl_group.hpp) make their communicators
// non-blocking (NCCL's config) and poll them with these. A peer that died, or never joined, then
// costs at most the caller's deadline (or less, when `stop` says so), after which the caller
// aborts the communicator, which also ends the NCCL kernels still waiting on the GPU.
//
// Each returns an empty string when the wait ended well, else why not. CUDA translation units only.

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <functional>
#include <string>

namespace kforge::trainer {

using nccl_clock = std::chrono::steady_clock;

/// What a wait is about, for its messages: `what` ("joining") and the text for a passed deadline.
struct nccl_wait {
  nccl_clock::time_point deadline;
  std::function<bool()> stop;  ///< optional: true ends the wait ("aborted while ...")
  std::string what;
  std::string late;
};

/// `r` is what an NCCL call on `comm` answered: polls the communicator's state while it says "in
/// progress" (joining, enqueuing).
std::string settle(ncclComm_t comm, ncclResult_t r, const nccl_wait& w);

/// Polls until the work queued on `stream` so far (NCCL kernels among it) is done, watching
/// `comm` for errors.
std::string drain(ncclComm_t comm, cudaStream_t stream, const nccl_wait& w);

/// Polls until `done` (an event recorded after NCCL calls on `comm`) has happened.
std::string drain_event(ncclComm_t comm, cudaEvent_t done, const nccl_wait& w);

}  // namespace kforge::trainer

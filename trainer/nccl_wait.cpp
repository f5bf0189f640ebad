#include "trainer/nccl_wait.hpp"

#include <thread>

namespace kforge::trainer {

std::string settle(ncclComm_t comm, ncclResult_t r, const nccl_wait& w) {
  while (r == ncclInProgress) {
    if (ncclCommGetAsyncError(comm, &r) != ncclSuccess) return w.what + ": cannot read the communicator's state";
    if (r != ncclInProgress) break;
    if (w.stop && w.stop()) return "aborted while " + w.what;
    if (nccl_clock::now() > w.deadline) return w.late;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (r != ncclSuccess) return w.what + " failed: " + ncclGetErrorString(r);
  return {};
}

std::string drain(ncclComm_t comm, cudaStream_t stream, const nccl_wait& w) {
  // An event marks the work queued so far: what other threads queue on the stream later is not
  // waited for.
  cudaEvent_t done = nullptr;
  if (const auto e = cudaEventCreateWithFlags(&done, cudaEventDisableTiming); e != cudaSuccess)
    return w.what + ": " + cudaGetErrorString(e);
  struct destroy {
    cudaEvent_t e;
    ~destroy() { cudaEventDestroy(e); }
  } destroy_done{done};
  if (const auto e = cudaEventRecord(done, stream); e != cudaSuccess) return w.what + ": " + cudaGetErrorString(e);
  return drain_event(comm, done, w);
}

std::string drain_event(ncclComm_t comm, cudaEvent_t done, const nccl_wait& w) {
  for (;;) {
    const cudaError_t q = cudaEventQuery(done);
    if (q == cudaSuccess) return {};
    if (q != cudaErrorNotReady) return w.what + ": " + cudaGetErrorString(q);
    ncclResult_t async = ncclSuccess;
    if (ncclCommGetAsyncError(comm, &async) == ncclSuccess && async != ncclSuccess && async != ncclInProgress)
      return w.what + ": " + ncclGetErrorString(async);
    if (w.stop && w.stop()) return "aborted while " + w.what;
    if (nccl_clock::now() > w.deadline) return w.late;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

}  // namespace kforge::trainer

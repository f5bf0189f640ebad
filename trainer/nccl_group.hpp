#pragma once
// NCCL ranks for the data-parallel trainer (trainer/collective.hpp): one rank per GPU, in one
// process (a thread per rank) or in many. Rank 0 makes the unique id (new_nccl_id) and every other
// rank receives its bytes by message (over the bus in a run) before joining. Built only where CUDA
// is (KFORGE_WITH_CUDA); tested by tests/trainer/dp_gpu_test.cpp on a host with 2 GPUs.
//
// The collectives run on the device's default (legacy) stream, the one LibTorch's ops use unless
// a caller sets another: they are ordered after the backward pass that wrote the gradients and
// before the optimiser step that reads them. The host waits for them (polling, see below).

#include <chrono>
#include <functional>
#include <memory>

#include "common/result.hpp"
#include "trainer/collective.hpp"
#include "trainer/nccl_id.hpp"

namespace kforge::trainer {

/// How long joining and each call may take, and when to stop waiting sooner. A rank whose process
/// died leaves the others' NCCL kernels waiting on the GPU: the communicator is non-blocking, so
/// a rank polls it, and past the deadline (or once `give_up` says true: rank 0's driver of the
/// rank processes has seen one fail) aborts it, which ends those kernels. The call fails naming
/// why, and every later call fails at once.
struct nccl_group_options {
  std::chrono::milliseconds join_timeout{std::chrono::minutes(10)};
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};
  std::function<bool()> give_up;  ///< optional; asked often while waiting
  /// all_reduce_sum_start runs in the background (sums_in_background). For ranks in processes of
  /// their own (join_rank_group sets it). Off by default, for ranks that are threads of one
  /// process: a sum left waiting for a peer thread while this thread's allocator synchronizes the
  /// device (cudaFree after an allocation failure) can deadlock in the driver, where no timeout
  /// reaches.
  bool background_sums = false;
};

/// Joins the group `id` as `rank` of `size` on CUDA device `device`. Blocks until every rank has
/// joined (or the join fails as above): the ranks of one process must call it from their own
/// threads. Tensors passed to the group's calls must be contiguous and on `device`; bf16, fp16,
/// fp32, fp64, int32 and int64 are supported. Each call returns once its sums are done on the GPU.
result<std::shared_ptr<collective>> make_nccl_group(const nccl_id& id, int rank, int size, int device,
                                                    nccl_group_options o = {});

}  // namespace kforge::trainer

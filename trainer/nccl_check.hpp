#pragma once
// An NCCL all-reduce across the GPUs of this process: the first piece of the trainer's
// data-parallel path, used by the GPU tests and by `kforge run` on a GPU host to show that NCCL
// works before a run depends on it.

#include <cstddef>
#include <vector>

#include "common/result.hpp"

namespace kforge::trainer {

struct nccl_check_report {
  int ranks = 0;
  int nccl_version = 0;
  std::size_t bytes = 0;
  double median_us = 0;       ///< median all-reduce time over the timed iterations
  double bus_bandwidth_gbs = 0;  ///< nccl-tests' definition: bytes * 2 (n-1)/n / time; 0 for 1 rank
};

/// Sums `elements` floats across `devices` (one rank per device, ncclCommInitAll) `iters` times and
/// checks every element of every rank equals the expected sum.
result<nccl_check_report> nccl_allreduce_check(const std::vector<int>& devices,
                                               std::size_t elements, int iters = 20);

}  // namespace kforge::trainer

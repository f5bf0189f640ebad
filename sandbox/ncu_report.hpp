#pragma once
// Reads Nsight Compute's CSV report (`ncu --csv --section SpeedOfLight --section Occupancy
// --section WarpStateStats --section LaunchStats PROGRAM`, its "details" page) into the short
// profile an observation shows (agent/observation.hpp): duration, achieved occupancy, DRAM and SM
// throughput as % of peak, and the warp stalls ncu's CPIStall rule names with their share of the
// cycles between two issued instructions. The program's own output and ncu's "==PROF==" lines
// before the CSV header are skipped.

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.hpp"

namespace kforge::sandbox {

/// Nsight Compute's short profile of one kernel of a correct candidate. It lives with the sandbox,
/// which collects it (ncu_profiler.hpp) and sends it in the verdict; observations render it.
struct kernel_profile {
  std::string kernel;
  double duration_us = 0;
  double achieved_occupancy_pct = 0;
  double dram_throughput_pct = 0;  ///< of peak
  double sm_throughput_pct = 0;    ///< of peak
  /// The warp-stall reasons that took the most samples, largest first, with their share in %.
  std::vector<std::pair<std::string, double>> stalls;
};

/// Every profiled kernel launch of the report, in its order. An error says what is missing (no
/// header, a launch without a duration).
result<std::vector<kernel_profile>> parse_ncu_csv(std::string_view csv);

/// The launch that took longest: where a kernel's time goes. An error when there is none.
result<kernel_profile> slowest_kernel(std::string_view csv);

}  // namespace kforge::sandbox

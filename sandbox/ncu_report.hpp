#pragma once
// Reads Nsight Compute's CSV report (`ncu --csv --section SpeedOfLight --section Occupancy
// --section WarpStateStats --section LaunchStats PROGRAM`, its "details" page) into the short
// profile an observation shows (observation.hpp): duration, achieved occupancy, DRAM and SM
// throughput as % of peak, and the warp stalls ncu's CPIStall rule names with their share of the
// cycles between two issued instructions. The program's own output and ncu's "==PROF==" lines
// before the CSV header are skipped.

#include <string_view>
#include <vector>

#include "agent/observation.hpp"
#include "common/result.hpp"

namespace kforge::agent {

/// Every profiled kernel launch of the report, in its order. An error says what is missing (no
/// header, a launch without a duration).
result<std::vector<kernel_profile>> parse_ncu_csv(std::string_view csv);

/// The launch that took longest: where a kernel's time goes. An error when there is none.
result<kernel_profile> slowest_kernel(std::string_view csv);

}  // namespace kforge::agent
